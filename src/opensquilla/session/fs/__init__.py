"""Files the store writes beside its database: private files, atomic staging, reset archives."""
