"""Tools around sessions (layer 5): the ``onnxplex`` command line (``cli``), latency
measurement and profile summaries (``perf``), placement pictures (``draw``, ``draw_layout``)
and charts (``charts``, ``timeline``; matplotlib when installed)."""
