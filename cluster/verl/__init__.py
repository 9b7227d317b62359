"""The verl backend's launcher and its parts: job (submit / run here), config (our config as verl's), plan (updates,
checkpoint bytes, the resumed step), stage (the files a job stages and exports), wait (the cluster, the policy
download, the watchdog)."""
