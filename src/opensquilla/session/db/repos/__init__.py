"""Repositories: the statements for one table each, run on a connection the unit of work owns.

A repository never commits; ``storage.py`` decides what one transaction holds.
"""
