"""Node providers for machines people already have: ``local`` (a list of SSH hosts), ``slurm``
(worker nodes as Slurm jobs) and ``external`` (a provider class of the user's own). The
``fake_multinode`` provider (local processes) is ``ember.autoscaler.fake_multinode``."""
