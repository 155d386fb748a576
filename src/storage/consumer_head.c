/*-------------------------------------------------------------------------
 *
 * consumer_head.c
 *	  A queue's head kept in its consumer relation's metapage
 *	  (SpindleCrelMeta.qhead): read when a queue's shared state is loaded
 *	  afresh, written from a snapshot of the state (queue_state.c), so that
 *	  a state loaded after an eviction, a restart or a crash starts at the
 *	  head instead of examining the queue's whole history again.
 *
 * What the head means (the queue layer keeps it, docs/design.md "Queues:
 * head, claims and leases"): below qhead.head, every id outside
 * qhead.ranges and not parked in tree 0 is consumed by a committed
 * transaction or was never an event.  This file only stores it; a write
 * is logged with GenericXLog (a delta of the metapage: a few hundred bytes,
 * and no redo code of our own for a plain overwrite of a few fields), so
 * whatever recovery keeps of it, it keeps the WAL written before, the
 * commit records of those consumptions included.
 *
 * Locks: the metapage's buffer lock, share to read, exclusive to write;
 * the caller holds the consumer relation (any lock conflicting with
 * TRUNCATE's AccessExclusiveLock) and no LWLock.
 *
 * Invariants: a write never replaces a snapshot with an older one (seq,
 * the WAL insert position when the snapshot was taken, only grows); a
 * metapage written before this field existed reads as "no head" (its bytes
 * are zero).  pd_lower covers the field once written, so full-page images
 * keep it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/xlog.h"
#include "storage/bufmgr.h"

#include "storage/spindle_storage.h"

/*
 * The head persisted in crel's metapage: false if none (never written, or
 * the relation is new, e.g. after TRUNCATE).
 */
bool
spindle_crel_head_read(Relation crel, SpindleCrelHead *h)
{
	Buffer		buf;
	SpindleCrelMeta *meta;
	bool		found;

	if (RelationGetNumberOfBlocks(crel) == 0)
		return false;
	buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_SHARE);
	meta = SpindleCrelGetMeta(BufferGetPage(buf));
	found = meta->qhead.head > 0 &&
		meta->qhead.nranges >= 0 &&
		meta->qhead.nranges <= SPINDLE_CREL_HEAD_RANGES;
	if (found)
		memcpy(h, &meta->qhead, sizeof(SpindleCrelHead));
	UnlockReleaseBuffer(buf);
	return found;
}

/*
 * Write the head h into crel's metapage unless it holds a newer snapshot
 * (a larger seq).  Returns whether it was written.
 */
bool
spindle_crel_head_write(Relation crel, const SpindleCrelHead *h)
{
	Buffer		buf;
	SpindleCrelMeta *meta;
	GenericXLogState *state;
	Page		page;

	Assert(h->head > 0 && h->nranges >= 0 &&
		   h->nranges <= SPINDLE_CREL_HEAD_RANGES);
	if (RelationGetNumberOfBlocks(crel) == 0)
		return false;
	buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	meta = SpindleCrelGetMeta(BufferGetPage(buf));
	if (meta->qhead.head > 0 && meta->qhead.seq > h->seq)
	{
		UnlockReleaseBuffer(buf);
		return false;
	}
	state = GenericXLogStart(crel);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	meta = SpindleCrelGetMeta(page);
	memcpy(&meta->qhead, h, sizeof(SpindleCrelHead));
	((PageHeader) page)->pd_lower =
		((char *) meta + sizeof(SpindleCrelMeta)) - (char *) page;
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
	return true;
}

/*
 * Lower the head in crel's metapage to `to` if it is above (dropping the
 * ranges at or past it), as a snapshot taken now: an older snapshot's
 * write is skipped from then on.  For an acknowledgement about to cut
 * parked runs below the head (queue.c, cut_acked_leases): should it not
 * commit, those events must be examined again.  Returns whether it wrote.
 */
bool
spindle_crel_head_lower(Relation crel, int64 to)
{
	Buffer		buf;
	SpindleCrelMeta *meta;
	GenericXLogState *state;
	Page		page;
	SpindleCrelHead *h;
	int			i;
	int			n = 0;

	if (RelationGetNumberOfBlocks(crel) == 0)
		return false;
	buf = spindle_crel_meta_lock(crel, BUFFER_LOCK_EXCLUSIVE);
	meta = SpindleCrelGetMeta(BufferGetPage(buf));
	if (meta->qhead.head <= to)
	{
		UnlockReleaseBuffer(buf);
		return false;			/* none, or at or below it already */
	}
	state = GenericXLogStart(crel);
	page = GenericXLogRegisterBuffer(state, buf, 0);
	h = &SpindleCrelGetMeta(page)->qhead;
	h->head = to;
	h->seq = Max(h->seq, (uint64) GetXLogInsertRecPtr());
	for (i = 0; i < h->nranges; i++)
		if (h->ranges[i][0] < to)
		{
			h->ranges[n][0] = h->ranges[i][0];
			h->ranges[n][1] = Min(h->ranges[i][1], to);
			n++;
		}
	h->nranges = n;
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
	return true;
}
