package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/xemahq/xema/internal/store/sqlstore"
)

// countsOn sends sqlstore's statement adding a call's counters at once on the counters' pgx
// pool itself (sqlstore.Store.WithCountQuery): through database/sql the add cost ~24 % of
// the gateway's CPU in a cached profile, a third of that database/sql's own.
func countsOn(pool *pgxpool.Pool) sqlstore.CountQuery {
	return func(ctx context.Context, q string, args []any) ([]int64, error) {
		rows, _ := pool.Query(ctx, q, args...) // its error is the rows'
		return pgx.CollectRows(rows, pgx.RowTo[int64])
	}
}
