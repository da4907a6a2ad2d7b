"""KFP pipeline definitions, the local runner, compile and deploy."""
