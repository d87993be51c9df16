"""The shipped conformance suites: ``pytest --pyargs fd_conformance.suite`` (or ``fd-conformance run``).

Each module is one contract clause from DESIGN.md (C1-C4, C6, protocol), parametrized by the
plugin over the selected model cases x devices (cpu = host-emulated graphs, cuda = real graphs).
"""
