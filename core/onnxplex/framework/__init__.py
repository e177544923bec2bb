"""The provider framework (layer 2): the provider contract (``provider``), plugin discovery
through entry points (``plugins``), the partitioner (``partition``), function expansion
(``functions``), the executor (``executor``) and feeds (``feeds``). Imports the base modules and
``graph`` only."""
