"""The use cases: each module decides what one kind of change does and opens the unit of
work it needs (``storage.uow.write()``/``read()``/``snapshot()``), so a change that touches
several rows commits together or not at all. ``SessionManager`` is their one front door.
"""
