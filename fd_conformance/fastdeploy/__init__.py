"""Bridge to the real engine: certify a FastDeploy checkout's own config, model classes and
runner teardown on CPU, without a GPU (``fd-conformance fastdeploy PATH``).

One module per concern: :mod:`.checkout` finds and validates the tree and builds the import
environment (torch hidden, compiled ops and missing modules stood in for by :mod:`.stand_ins`);
:mod:`.config_bridge` (C6 on the real ``FDConfig``), :mod:`.models_bridge` (protocol on every
registered model class), :mod:`.runner_bridge` (the real ``GPUModelRunner.clear_parameters`` body
over the recorded stand-ins of :mod:`.runner_stand_ins`), :mod:`.wrappers_bridge` (every registered wrapper built on CPU, its own
clear called: :mod:`.wrapper_build` builds it from :mod:`.tiny_config`, :mod:`.recorded_graphs`
plants its graphs), :mod:`.real_runner` (the runner body over those real wrappers and their MTP
drafts), :mod:`.history` (``--history``/``--bisect``); :mod:`fd_conformance.cli.fastdeploy` runs
the five tables (:mod:`fd_conformance.cli.fastdeploy_tables` prints them). Nothing here imports
paddle or fastdeploy at module import time: ``fd-conformance --help`` must stay framework-free.
"""
