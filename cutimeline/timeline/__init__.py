"""The store: ``Timeline`` and ``Table`` (columnar numpy tables, one string
table, JSON meta) and the ``.ctl`` file format."""
