"""The stage kinds' bodies: what a job runs, one module per kind (``run(cfg, <roles>=folder,
out_dir=folder)``), and their helpers. The runtime imports a kind's body only when a job runs it
(``StageKind.run``): planning reads the declarations in stages/ alone, so a body imports what it uses
at the top."""
