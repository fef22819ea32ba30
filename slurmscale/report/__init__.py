"""`slurmscale report`: what capacity was bought, used and waited for, for cron."""
