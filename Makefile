# Makefile for the spindle extension (PGXS)

MODULE_big = spindle
OBJS = \
	src/storage/segment_am.o \
	src/storage/layout.o \
	src/storage/slotmap.o \
	src/storage/mapdir.o \
	src/storage/local_cache.o \
	src/storage/eventinsert.o \
	src/storage/slots.o \
	src/storage/tombstones.o \
	src/storage/counters.o \
	src/storage/rangepurge.o \
	src/storage/consumer_rel.o \
	src/storage/consumer_page.o \
	src/storage/consumer_tree.o \
	src/storage/consumer_xlog.o \
	src/storage/consumer_test.o \
	src/storage/consume_log.o \
	src/storage/relocation.o \
	src/storage/relocation_forget.o \
	src/storage/touched.o \
	src/storage/catalog_spi.o \
	src/table/directory.o \
	src/table/directory_catalog.o \
	src/table/spindle_create.o \
	src/table/facade_am.o \
	src/table/kept_ids.o \
	src/table/facade_scan.o \
	src/table/hidden.o \
	src/table/hidden_test.o \
	src/table/annex.o \
	src/table/relocate.o \
	src/table/purge_events.o \
	src/table/options.o \
	src/table/maintenance.o \
	src/table/detach.o \
	src/table/ttl.o \
	src/table/disk_alarm.o \
	src/queue/queue_catalog.o \
	src/queue/queue_state.o \
	src/queue/queue_parked.o \
	src/queue/cache.o \
	src/queue/queue_insert.o \
	src/queue/queue.o \
	src/queue/queue_consumed.o \
	src/queue/queue_compact.o \
	src/queue/queue_api.o \
	src/queue/queue_limits.o \
	src/admin/spindle.o \
	src/admin/worker.o \
	src/admin/views.o \
	src/admin/utility.o \
	src/admin/verify.o \
	src/admin/publication.o

EXTENSION = spindle
DATA = sql/spindle--0.1.sql
PGFILEDESC = "spindle - spindle queues for PostgreSQL"

PG_CPPFLAGS = -I$(srcdir)/src

# pg_regress and pg_isolation_regress run a private server built from the
# installed binaries; shared_preload_libraries comes from test/spindle.conf.
REGRESS = am_basic cache options dml indexes drop_spindles views ddl_refusals toast tids owners \
	purge_expired freeze inheritance privileges hardening rangepurge queue_api queue_insert queue_consume \
	creation queue_fk verify bad_input privileges_queue views_counters \
	ttl_subxact ttl_fk temp_spindle ttl_memory \
	review_s_counters review_s_cache review_s_dropdb queue_drop_rollback \
	review_t_segment review_t_input \
	review_u_ddl review_u_ddl_view review_u_verify review_u_truncate \
	review_w_direct core_review core_review2 disk_alarm queue_review_registry queue_review_consume \
	consume_log_dequeue consume_log_verify consume_log_cluster capacity_rollback msgid keep_msg_ids msgid_rollback queue_caps queue_limits lease_handback ttl_lease consumer_relation consumer_tree bigtid \
	delayed_scale lease_scale consume_log annex relocation compaction relocation_consume ttl_annex reloc_forget
REGRESS_OPTS = --temp-instance=tmp_check --temp-config=$(srcdir)/test/spindle.conf \
	--load-extension=spindle
ISOLATION = cache_visibility insert_boundary rr_drop skip_locked rights_before_locks producers_behind_sue no_waits \
	settled rangepurge_mvcc queue_checks_before_locks queue_consumers directory_changes views_counters \
	queue_ack_items review_s_many_spindles \
	review_u_consume_progress \
	review_w_rights review_w_recreate fk_update_conflict filled_at_window \
	queue_review_rights queue_review_snapshot queue_review_longpoll bigtid_epq \
	delayed_due_race lease_ack_abort queue_limits_race longpoll_ddl_spindle handback_nowait \
	queue_limits_count consume_log_mvcc consume_log_ssi keep_msg_ids_race consume_log_dequeue consume_log_mixed consume_log_writers \
	annex_race relocation_mvcc relocation_consume_race reloc_forget_stale reloc_forget_chain reloc_forget_swap queue_order_items consume_log_rebuild consume_log_free_reuse
ISOLATION_OPTS = --inputdir=$(srcdir)/test --temp-instance=tmp_check_iso \
	--temp-config=$(srcdir)/test/spindle.conf --load-extension=spindle
TAP_TESTS = 1
PROVE_TESTS = test/t/*.pl

# Rebuild an object when a header it includes changes (the layers' headers
# are shared by every file of a layer and the ones above): PGXS's own
# dependency tracking, which Debian's build leaves off.
override autodepend = yes

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# ---- benchmark harness (issue 9): bench/run.sh; the report is
# docs/benchmarks.md.  Needs spindle installed (scripts/build.sh or make
# install); as root it installs PgQ, pg_partman and gnuplot itself.
.PHONY: bench bench-short bench-stragglers bench-wal-checkpoint bench-queues bench-sparse bench-backlog
bench:
	PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/run.sh
bench-short:
	BENCH_SHORT=1 PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/run.sh
# issue 18: dequeue and read + ack with 0 and BENCH_N (10^6) delayed events
# and leases, spindle's shared memory; prints a table (docs/benchmarks.md,
# "Delayed events and leases at scale").  ROUNDS, SECS, BENCH_N: see the
# script's header.
bench-stragglers:
	PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/stragglers.sh
# issue 19, each a script that prints its figures (the scale knob and the
# full size in its header; sections in docs/benchmarks.md, kept in
# bench/<name>.md and spliced in by bench/report.py --splice):
# WAL per consumed event with a CHECKPOINT before the drain (BENCH_EVENTS)
bench-wal-checkpoint:
	PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/wal_checkpoint.sh
# dequeue(q, 1) round-robin over many queues, shared memory (BENCH_QUEUES)
bench-queues:
	PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/queues.sh
# size with 1 in 1 000 events delayed or leased forever (BENCH_EVENTS)
bench-sparse:
	PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/sparse.sh
# dequeue(q, 100) from a large backlog, and the size once drained (BENCH_EVENTS)
bench-backlog:
	PG_CONFIG=$(PG_CONFIG) bash $(srcdir)/bench/backlog.sh
