"""Roles as worker groups: many ranks over devices and Ray nodes.

* :mod:`.layout` -- pure: a config's roles -> ranks -> device slots, the bundles they share
  (colocation, tensor-parallel groups packed together), checked before anything starts.
* :mod:`.placement` -- Ray: the run's placement group built from a layout; where each rank landed.
* :mod:`.dispatch` -- pure: batches split over data-parallel ranks (balanced by tokens, equal
  counts), results gathered back in row order, metrics reduced.
* :mod:`.worker_group` -- a role's ranks (Ray actors) called like one worker.
* :mod:`.process_group` -- inside a rank: the torch.distributed process group from the usual
  ``RANK`` / ``WORLD_SIZE`` / ``MASTER_ADDR`` / ``MASTER_PORT`` variables (gloo on CPU, nccl on GPUs).
"""
