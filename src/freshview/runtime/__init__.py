"""Execution of incremental circuits on Apache Spark.

``spark`` owns the SparkSession (embedded ``local[*]``, a cluster, or Spark
Connect); ``state`` owns operator state on disk behind one protocol, so the
storage layout can change without touching operators; ``operators`` holds one
module per circuit node, each stating its delta rule; ``executor`` runs one
step of a circuit: deltas in, deltas out, state updated in one transaction.
This package imports ``circuit``, ``plan``, ``algebra`` and ``schema``; it
never imports ``flow``, connectors or the service.
"""
