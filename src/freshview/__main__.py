from freshview.cli.app import main

main()
