"""SessionManager: the one front door. Everything is addressed by session key.

Each method is one use case from ``usecases/``, which opens the unit of work it needs; the
manager holds the wiring (storage, the generation cache, the summariser, the append
options) and no logic of its own. It never writes SQL. Its transcript calls are in
``transcript.py`` (:class:`TranscriptCalls`), its batch and removal calls in ``batches.py``
(:class:`BatchCalls`), its search calls in ``search.py``
(:class:`SearchCalls`), its reset-archive calls in ``archives.py`` (:class:`ArchiveCalls`),
its prepared intents in ``prepared.py`` (:class:`PreparedCalls`), its context-state calls in
``context_states.py`` (:class:`ContextStateCalls`), its session calls (lifecycle, listing,
reset, retention, stats) in ``sessions.py`` (:class:`SessionCalls`), its branch in
``branching.py`` (:class:`BranchCalls`), its compaction calls in ``compaction.py``
(:class:`CompactionCalls`), its session and scoped state in ``state.py``
(:class:`StateCalls`), the rest here.
"""

from __future__ import annotations

from ..compaction import Summarizer
from ..observe import instrumented
from ..storage import SessionStorage
from ..usecases.compaction import Compactor
from ..usecases.generations import GenerationCache
from ..usecases.lifecycle import Lifecycle
from ..usecases.reset import Resets
from ..usecases.transcript import MemorySyncNotify, Transcripts
from .archives import ArchiveCalls
from .batches import BatchCalls
from .branching import BranchCalls
from .compaction import CompactionCalls
from .context_states import ContextStateCalls
from .prepared import PreparedCalls
from .search import SearchCalls
from .sessions import SessionCalls
from .state import StateCalls
from .transcript import TranscriptCalls


# Every public coroutine is an operation (debug record, span, histogram); the memory-sync
# callback is the application's own code, timed by the application.
@instrumented(
    "",
    system=lambda manager: manager.storage.backend,
    exclude=frozenset({"notify_message_appended"}),
)
class SessionManager(
    SessionCalls,
    TranscriptCalls,
    BatchCalls,
    BranchCalls,
    SearchCalls,
    ArchiveCalls,
    PreparedCalls,
    ContextStateCalls,
    CompactionCalls,
    StateCalls,
):
    """Session lifecycle, transcript, intents, branching, compaction, context states and
    retention, by session key."""

    def __init__(
        self,
        storage: SessionStorage,
        memory_sync_notify: MemorySyncNotify | None = None,
        *,
        inject_time_prefix: bool = True,
        time_prefix_tz: str | None = None,
        summarizer: Summarizer | None = None,
        commit_against_source: bool | None = None,
        archive_required: bool = False,
    ) -> None:
        """A manager on ``storage``.

        ``inject_time_prefix=True`` (the default, as the older store did) makes
        ``append_message`` store each *user* message with its time as a first line:
        ``"hello"`` is stored and returned as ``"[2026-11-30T12:34+00:00 Mon UTC]\nhello"``
        (zone: ``time_prefix_tz``, else ``$OPENSQUILLA_TIMEZONE``, ``$TZ``, the local zone).
        Pass ``inject_time_prefix=False`` to store content exactly as given
        (docs/semantics.md#time-prefix).
        """
        self._storage = storage
        self._generations = GenerationCache()
        resets = Resets(
            self._generations,
            storage.archive_place,
            archive_required=archive_required,
            archive_lost=storage.count_lost_reset_archive,
        )
        self._lifecycle = Lifecycle(self._generations, resets)
        self._transcripts = Transcripts(
            self._generations,
            memory_sync_notify=memory_sync_notify,
            inject_time_prefix=inject_time_prefix,
            time_prefix_tz=time_prefix_tz,
        )
        self._compactor = Compactor(summarizer, commit_against_source=commit_against_source)

    @property
    def storage(self) -> SessionStorage:
        return self._storage

    def get_cached_epoch(self, session_key: str) -> int | None:
        return self._generations.cached_epoch(session_key)

    def set_cached_epoch(self, session_key: str, epoch: int) -> None:
        self._generations.observe_epoch(session_key, epoch)
