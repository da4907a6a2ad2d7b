"""The train stage: the BST CTR model (model.py) and, later, its DDP trainer."""
