from cms.cli import main

main()
