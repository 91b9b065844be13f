module weft/benchmark/io/peers/go

go 1.22
