"""The daemon: the reconcile loop and the local API."""
