from tcc.cli.main import main

main()
