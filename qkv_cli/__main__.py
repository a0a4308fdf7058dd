from qkv_cli.cli import main

main()
