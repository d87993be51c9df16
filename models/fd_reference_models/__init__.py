"""Reference model zoo the conformance suites certify: FastDeploy-shaped wrappers and known-bad mutants.

``graph_opt`` (decorator + backend) and ``runner`` are framework-free aliases of the public
:mod:`fd_conformance.engine`; ``torch_models`` and ``paddle_models`` hold the framework code and
are imported lazily by ``cases.all_cases()``.
"""
