"""Everything that knows Kubernetes, in one package (the stages under ``components/`` import none of it).

Shaped like the Kubeflow trainer SDK:

* :mod:`kube.types`     what is defined once: namespace, shared volume, image names, the node
                        pool (label, taint, node profile; read from the overlay), cluster targets;
* :mod:`kube.trainjob`  pure builders/readers of Kubeflow Trainer ``TrainJob`` objects;
* :mod:`kube.dask`      the pure ``DaskCluster`` builder (dask-kubernetes operator);
* :mod:`kube.katib`     the Katib ``Experiment`` builder (``python -m kube.katib``);
* :mod:`kube.validate`  strict offline validation (unknown fields, CEL rules);
* :mod:`kube.tasks`     Kubernetes settings of the KFP tasks (volume, resources, labels, Secrets);
* :mod:`kube.client`    the one module that talks to the API server (``kubernetes`` client,
                        dask-kubernetes): :class:`kube.client.TrainJobBackend`, Dask clusters,
                        deletion.

The caller picks the training backend and passes it in:
``launch(spec, TrainJobBackend(target))`` on the cluster, ``launch(spec, LocalTorchrun())`` here.
"""
