"""The context a request replays, one name for its modules (docs/semantics.md#context-view,
#rolling-checkpoints, #provider-states):

* ``view``: the prompt's view of a session (latest summary plus the newest live messages
  that fit a budget), one snapshot;
* ``records``: the compaction checkpoints in force, projected from summaries and states;
* ``states``: the provider context states of a key, saved, read, chosen, invalidated;
* ``provider_states``: choosing the state a provider replays (pure, no I/O).
"""
