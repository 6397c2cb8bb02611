"""The Ray actors that host strategies, and the groups that call a role's ranks like one worker.

* :mod:`.train_worker` -- one rank of ``actor_train`` / ``critic`` / ``reference`` (a train strategy).
* :mod:`.train_group` -- a train role's ranks, called like one worker (dispatch over data parallel).
* :mod:`.infer_worker` -- one rank of ``actor_infer`` (an infer strategy).
* :mod:`.infer_group` -- ``actor_infer``'s workers and the generate scheduler in front of them.
* :mod:`.generate_scheduler` -- the one front door for every generate request, batched for the workers.

Where the actors land (placement groups, ranks, devices) is :mod:`roll_core.distributed`'s job.
"""
