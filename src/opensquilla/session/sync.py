"""The synchronous front door, for Flask, Django, scripts: the async core on one loop.

:class:`SyncSessionStorage` opens a :class:`SessionStorage` on a background event-loop
thread of its own and keeps it there; :class:`SyncSessionManager` is a
:class:`SessionManager` on that storage. Every method of the async classes is generated
here (so the two APIs cannot drift): a coroutine method becomes a blocking call run on the
loop (``asyncio.run_coroutine_threadsafe``), an async iterator a plain iterator, and the
exception raised is the one the async call raised, type and all. Any number of threads may
call at once: their calls run as concurrent tasks on the one loop, as they would in an
async application. Callbacks given to the manager (``memory_sync_notify``, a summariser)
run on that loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import TYPE_CHECKING, Any, Self, TypeVar

from .manager import SessionManager
from .storage import SessionStorage, StorageNotConnectedError

if TYPE_CHECKING:
    from .db.dsn import StorageTarget
    from .fs.reset_archive import RecoveredArchive

T = TypeVar("T")


class _LoopThread:
    """One event loop running forever on a daemon thread, until :meth:`stop`."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="opensquilla-session-loop", daemon=True
        )
        self._lock = threading.Lock()  # submitting a call vs. stopping the loop
        self.stopped = False
        self._thread.start()

    def run(self, make: Callable[[], Awaitable[T]]) -> T:
        """Await ``make()`` on the loop and return its result (or raise its exception)."""
        if threading.current_thread() is self._thread:
            raise RuntimeError(
                "a synchronous session call was made on the store's own loop thread (from a "
                "callback?); it would wait for itself: await the async storage there instead"
            )

        async def call() -> T:
            return await make()

        with self._lock:
            if self.stopped:
                raise StorageNotConnectedError("Storage not connected. Call connect() first.")
            future = asyncio.run_coroutine_threadsafe(call(), self._loop)
        try:
            return future.result()
        except BaseException:
            future.cancel()  # the caller was interrupted (KeyboardInterrupt): stop the task
            raise

    def iterate(self, iterator: AsyncIterator[T]) -> Iterator[T]:
        finished = False
        try:
            while True:
                try:
                    item = self.run(iterator.__anext__)
                except StopAsyncIteration:
                    finished = True
                    return
                yield item
        finally:
            aclose = getattr(iterator, "aclose", None)
            if not finished and aclose is not None and not self.stopped:
                self.run(aclose)

    def stop(self, last: Callable[[], Awaitable[None]]) -> None:
        """Refuse new calls, cancel the ones still running (their callers get
        ``CancelledError``), await ``last()`` on the loop, then end the thread."""
        with self._lock:
            if self.stopped:
                return
            self.stopped = True

        async def wind_down() -> None:
            running = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            for task in running:
                task.cancel()
            await asyncio.gather(*running, return_exceptions=True)
            await last()

        try:
            asyncio.run_coroutine_threadsafe(wind_down(), self._loop).result()
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
            self._loop.close()


def _returns_async_iterator(function: Callable[..., Any]) -> bool:
    annotation = inspect.signature(function).return_annotation
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    return inspect.isasyncgenfunction(function) or str(text).startswith("AsyncIterator")


def _blocking(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
    """The synchronous twin of the async class's method ``name``."""
    if _returns_async_iterator(function):

        @functools.wraps(function)
        def iterate(self: _Facade, *args: Any, **kwargs: Any) -> Iterator[Any]:
            return self._loop_thread.iterate(getattr(self._async, name)(*args, **kwargs))

        signature = inspect.signature(function)
        iterate.__signature__ = signature.replace(  # type: ignore[attr-defined]
            return_annotation=str(signature.return_annotation).replace("AsyncIterator", "Iterator")
        )
        return iterate
    if inspect.iscoroutinefunction(function):

        @functools.wraps(function)
        def call(self: _Facade, *args: Any, **kwargs: Any) -> Any:
            return self._loop_thread.run(lambda: getattr(self._async, name)(*args, **kwargs))

        return call

    @functools.wraps(function)
    def plain(self: _Facade, *args: Any, **kwargs: Any) -> Any:
        async def on_the_loop() -> Any:  # the async object's state is touched on its loop only
            return getattr(self._async, name)(*args, **kwargs)

        return self._loop_thread.run(on_the_loop)

    return plain


def _read_through(name: str, value: property) -> property:
    """The async object's property ``name`` (``value``), read as it is on the calling
    thread: a plain value, set at construction or by ``connect()``, no I/O."""

    def read(self: _Facade) -> Any:
        return getattr(self._async, name)

    return property(read, doc=value.__doc__)


def _mirror(source: type, *, skip: frozenset[str] = frozenset()) -> Callable[[type[T]], type[T]]:
    """Give the decorated class a synchronous twin of every public method of ``source``
    (``skip`` and anything it defines itself excepted); static methods are shared as is;
    the properties the decorated class declares by annotation alone are read through
    (:func:`_read_through`), so a type checker sees them with their types."""

    def decorate(cls: type[T]) -> type[T]:
        for name in dir(source):
            if name.startswith("_") or name in skip or name in cls.__dict__:
                continue
            raw = inspect.getattr_static(source, name)
            if isinstance(raw, staticmethod):
                setattr(cls, name, raw)
            elif inspect.isfunction(raw):
                setattr(cls, name, _blocking(name, raw))
        for name in inspect.get_annotations(cls):
            setattr(cls, name, _read_through(name, inspect.getattr_static(source, name)))
        return cls

    return decorate


class _Facade:
    """What the generated methods need: the async object and the loop it lives on; and the
    context manager, closing on exit."""

    _async: Any
    _loop_thread: _LoopThread

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


# SessionStorage methods the sync storage does not mirror: its lifecycle is its own.
_STORAGE_LIFECYCLE = frozenset(
    {"connect", "connect_without_migrating", "close", "open", "from_engine"}
)


@_mirror(SessionStorage, skip=_STORAGE_LIFECYCLE)
class SyncSessionStorage(_Facade):
    """A connected :class:`SessionStorage` on its own event-loop thread, called
    synchronously. Takes what ``SessionStorage`` takes; connects (migrating to head) at
    construction; ``close()`` (or ``with``) disposes of it and stops the thread."""

    # The storage's properties read through: plain values (not the engine or the unit of
    # work, which belong to the loop), declared here with their types.
    target: StorageTarget
    backend: str
    is_connected: bool
    recovered_archives: tuple[RecoveredArchive, ...]
    archive_store_tag: str

    def __init__(self, target: Any = ":memory:", **options: Any) -> None:
        self._async: SessionStorage = SessionStorage(target, **options)
        self._loop_thread = _LoopThread()
        try:
            self._loop_thread.run(self._async.connect)
        except BaseException:
            self._loop_thread.stop(self._async.close)
            raise

    @property
    def async_storage(self) -> SessionStorage:
        """The async storage underneath (usable only on this object's loop thread)."""
        return self._async

    def close(self) -> None:
        """Close the storage and stop its loop thread; idempotent. Calls other threads
        still have running are cancelled first (they raise ``CancelledError``)."""
        self._loop_thread.stop(self._async.close)

    def __repr__(self) -> str:
        return f"Sync{self._async!r}"


@_mirror(SessionManager)
class SyncSessionManager(_Facade):
    """:class:`SessionManager`, synchronously: the same methods, arguments, results and
    errors. ``storage`` is a :class:`SyncSessionStorage` (left open by ``close()``) or a
    target for one (``":memory:"``, a path, a URL; closed with the manager); the other
    arguments are ``SessionManager``'s."""

    def __init__(
        self,
        storage: SyncSessionStorage | str | os.PathLike[str] = ":memory:",
        *args: Any,
        **kwargs: Any,
    ) -> None:
        self._owns_storage = not isinstance(storage, SyncSessionStorage)
        self._storage = (
            storage if isinstance(storage, SyncSessionStorage) else (SyncSessionStorage(storage))
        )
        self._loop_thread = self._storage._loop_thread
        async_storage = self._storage.async_storage

        async def build() -> SessionManager:
            return SessionManager(async_storage, *args, **kwargs)

        try:
            self._async: SessionManager = self._loop_thread.run(build)
        except BaseException:
            if self._owns_storage:
                self._storage.close()
            raise

    @property
    def storage(self) -> SyncSessionStorage:
        return self._storage

    def close(self) -> None:
        """Close the storage if this manager opened it; idempotent."""
        if self._owns_storage:
            self._storage.close()


__all__ = ["SyncSessionManager", "SyncSessionStorage"]
