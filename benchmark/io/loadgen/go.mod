module weft/benchmark/io/loadgen

go 1.22
