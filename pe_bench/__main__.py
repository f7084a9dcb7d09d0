from pe_bench.cli import main

main()
