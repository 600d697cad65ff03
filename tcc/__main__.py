from tcc.cli.entry import main

main()
