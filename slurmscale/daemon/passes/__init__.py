"""The reconcile loop's passes, one job each (requests, launches, interruptions, health, the
capacity plan carried out, ...): each reads, decides and hands its effects to the executor."""
