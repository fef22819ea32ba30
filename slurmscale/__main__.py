from slurmscale.cli import main

main()
