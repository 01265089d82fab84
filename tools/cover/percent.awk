# Go statement coverage of two runs over one denominator: every block of ALL (the profile of
# the unit tests and the e2e runs merged, `go tool covdata textfmt`), covered by UNIT (the unit
# tests' profile) or by ALL. Usage: awk -f percent.awk unit.out all.out
# Lines are "file:start,end statements count" after a "mode:" line.
FNR == 1 { next }
NR == FNR { if ($3 > 0) unit[$1] = 1; next }
{
	if (seen[$1]++) next
	total += $2
	if (unit[$1]) u += $2
	if ($3 > 0) a += $2
}
END {
	if (total == 0) { print "no statements"; exit 1 }
	printf "Go statement coverage, unit tests only:  %.1f%% of %d statements\n", 100 * u / total, total
	printf "Go statement coverage, unit + e2e:       %.1f%% of %d statements\n", 100 * a / total, total
}
