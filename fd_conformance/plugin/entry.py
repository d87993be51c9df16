"""The pytest11 entry point (``fd_conformance``): loads the plugin package as a plugin of its own.

The entry point names this module rather than the package so that ``-p fd_conformance.plugin`` (how a
session loads the plugin by module, e.g. with plugin autoloading off) and the entry point can meet in
one session: pytest registers the package under its module name, and this module under the entry
point's name, which ``-p no:fd_conformance`` blocks. Were both the package, pluggy would refuse the
second registration of one module object ("Plugin already registered under a different name") and
every such session would stop before collecting.

PYTEST_DONT_REWRITE: holds no test assertions.
"""

pytest_plugins = ["fd_conformance.plugin"]
