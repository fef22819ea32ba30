from slurmscale.entry import main

main()
