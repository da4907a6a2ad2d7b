"""The KFP adapters of the stages: one module per stage, each a thin ``@dsl.component`` whose body
imports the stage (``components.<stage>``) and calls it, choosing the cluster backend (``kube``)
where the stage takes one. ``components/`` imports neither kfp nor kube; these do."""
