# A run's data and its checkpoint directory: --data of several shards or a
# pattern and --val-data's held-out loss; one run per checkpoint directory
# (resumes checkpoint where they resume, another run's checkpoints refused,
# the directory's lock held for the whole run), and a second Ctrl-C during
# a save leaves no temporary.
remat_cli_test(val_data val_data.sh LABELS unit)
remat_cli_test(ckpt_dir ckpt_dir.sh LABELS unit)
