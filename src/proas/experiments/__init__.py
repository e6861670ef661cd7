"""Studies of the paper (main table, ablations) as configs, a parallel grid runner, the report.

``spec`` reads the study configs (``configs/*.yaml``), ``runner`` runs their grids of
``proas train`` runs, ``report`` turns a results directory into the paper's tables and curves.
"""
