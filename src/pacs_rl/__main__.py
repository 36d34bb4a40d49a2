from pacs_rl.cli import main

main()
