"""Repositories: the statements for one table each, run on a connection the unit of work owns.

Each is a class bound to the connection of one unit of work (``db/uow.py``); a repository
never commits: the use case that opened the unit of work decides what one transaction holds.
"""
