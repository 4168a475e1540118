"""The manager's batch and removal calls by session key (issue 28, docs/messages.md):
``append_messages``, ``pop_message``, ``delete_entry``.

A part of :class:`SessionManager`, kept apart by job: the front door (arguments checked,
the key canonicalised, once) over one use case of ``usecases/batches.py`` each.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..keys import canonicalize_session_key
from ..models import TranscriptEntry, check_integer
from ..models.messages import MessageInput, check_messages
from ..storage import SessionStorage
from ..usecases import batches
from ..usecases.transcript import Transcripts


class BatchCalls:
    """Many messages in, one out (see :class:`SessionManager`)."""

    _storage: SessionStorage
    _transcripts: Transcripts

    async def append_messages(
        self, session_key: str, messages: Sequence[MessageInput]
    ) -> list[TranscriptEntry]:
        """Append ``messages`` (each a mapping: ``role``, ``content`` and the keyword fields
        of :meth:`append_message`) to the current generation, in order, in one fenced
        transaction; the entries returned with their ids.

        Every message is checked first: a bad one refuses the whole batch
        (``InvalidInputError`` naming ``messages[i]`` and the field) and nothing is written.
        All of the batch or nothing of it is written (a failure or a cancellation before the
        commit leaves nothing); two concurrent batches never interleave; a bounded number
        of statements whatever the size. ``total_tokens`` grows by the sum of each entry's
        delta (:meth:`append_message`'s rule, per entry); each defaulted ``created_at`` is
        not before the generation's newest live entry, nor before the batch's previous
        entry. A ``message_id`` names a new entry: one already live is refused (a batch only
        adds; :meth:`append_message` replaces by id). User content gets the time prefix as
        in :meth:`append_message`; the memory-sync callback fires once for the batch. An
        empty list returns ``[]`` and touches nothing (not even the session row).
        """
        checked = check_messages(messages)
        key = canonicalize_session_key(session_key)
        return await batches.append_messages(self._storage.uow, self._transcripts, key, checked)

    async def pop_message(self, session_key: str) -> TranscriptEntry | None:
        """Remove the newest live entry of the current generation (``created_at``, then
        ``id``, descending) and return it, atomically; ``None`` when it has none, or when
        the session does not exist. Two concurrent pops never return the same entry. The
        session's counters (``total_tokens`` and the rest) are left as they are: they count
        usage, not rows. The compacted archive is never touched."""
        key = canonicalize_session_key(session_key)
        return await batches.pop_message(self._storage.uow, key)

    async def delete_entry(self, session_key: str, entry_id: int) -> bool:
        """Delete the live entry with row id ``entry_id`` (``TranscriptEntry.id``) if it
        belongs to the current generation of ``session_key``; ``True`` iff it did. An id of
        another session, an older generation or the compacted archive deletes nothing.
        Counters are left as they are (as :meth:`pop_message`)."""
        check_integer("entry_id", entry_id, minimum=-(2**63))
        key = canonicalize_session_key(session_key)
        return await batches.delete_entry(self._storage.uow, key, entry_id)
