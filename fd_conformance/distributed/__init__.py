"""Multi-process worlds (FDC6xx): world (N spawned rank workers, one clock) and capture_plan
(every rank agrees on the capture order before any collective is captured)."""
