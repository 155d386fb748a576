/*-------------------------------------------------------------------------
 *
 * chunkmap.c
 *	  The chunk map: virtual block numbers for the pages of spindles.
 *
 * Why: PostgreSQL 15 reads the facade relation's own files with the block
 * numbers of the TIDs it holds.  Bitmap heap scans and ANALYZE call
 * PrefetchBuffer(facade, block) and md.c raises an error for any block past
 * the first 1 GB segment ("previous segment is only N blocks").  So every
 * TID a spindle table hands out (to indexes, to ctid, to the executor) must
 * have a block number below RELSEG_SIZE (131072), whatever spindle it lives
 * in and however many spindles have come and gone.
 *
 * How: the virtual block space [0, 131072) is cut into SPINDLE_NCHUNKS
 * chunks of SPINDLE_CHUNK_BLOCKS blocks.  Block 0 of the facade's main fork
 * is a metapage holding one uint32 per virtual chunk: zero when free, else
 * (spindle tag << 10 | physical chunk number).  A spindle page gets a
 * virtual chunk the first time a tuple is placed on it; offsets are kept
 * as they are.  The map is changed under an exclusive lock on the metapage
 * buffer and WAL-logged with GenericXLog, independently of the inserting
 * transaction, so a crash or a standby sees the same map.
 *
 * A chunk is freed only after every index entry pointing into it has been
 * removed (maintenance.c), so a TID never comes to mean a different event
 * while any index still holds it.  The limit this imposes: a spindle table
 * can hold at most 1 GB of spindle pages (not counting TOAST) that are not
 * yet dropped and cleaned; past it, inserts fail with SQLSTATE 54000.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/xloginsert.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/smgr.h"
#include "utils/rel.h"

#include "spindle.h"

#define SPINDLE_META_MAGIC		0x5350494E	/* "SPIN" */
#define SPINDLE_META_VERSION	1
#define SPINDLE_TAG_BITS		22
#define SPINDLE_PCHUNK_BITS		10
#define SPINDLE_PCHUNK_MASK		((1 << SPINDLE_PCHUNK_BITS) - 1)

typedef struct SpindleMetaPageData
{
	uint32		magic;
	uint32		version;
	uint32		entries[SPINDLE_NCHUNKS];
} SpindleMetaPageData;

#define SpindleMetaPageGet(page) ((SpindleMetaPageData *) PageGetContents(page))

StaticAssertDecl(SPINDLE_NCHUNKS << SPINDLE_CHUNK_BITS <= RELSEG_SIZE,
				 "virtual blocks must stay in the first segment");
StaticAssertDecl(MAXALIGN(SizeOfPageHeaderData) + sizeof(SpindleMetaPageData) <= BLCKSZ,
				 "chunk map must fit in one page");

/*
 * The 22-bit tag of a spindle number, never zero.  Tags of the spindles a
 * table holds at once are distinct unless four million spindles separate
 * the oldest undropped one from the newest.
 */
uint32
spindle_tag(int64 spindle_no)
{
	return (uint32) ((spindle_no - 1) % ((1 << SPINDLE_TAG_BITS) - 1)) + 1;
}

static inline uint32
make_entry(int64 spindle_no, uint32 pchunk)
{
	return (spindle_tag(spindle_no) << SPINDLE_PCHUNK_BITS) | pchunk;
}

/*
 * Write an empty chunk map as block 0 of the given fork; WAL-log it when
 * asked (the caller knows whether the relation needs WAL).
 */
void
spindle_chunkmap_init_fork(Relation facade, SMgrRelation srel,
						   ForkNumber fork, bool wal)
{
	PGAlignedBlock buf;
	Page		page = (Page) buf.data;
	SpindleMetaPageData *meta;

	PageInit(page, BLCKSZ, 0);
	meta = SpindleMetaPageGet(page);
	memset(meta, 0, sizeof(SpindleMetaPageData));
	meta->magic = SPINDLE_META_MAGIC;
	meta->version = SPINDLE_META_VERSION;
	((PageHeader) page)->pd_lower =
		((char *) meta + sizeof(SpindleMetaPageData)) - (char *) page;

	PageSetChecksumInplace(page, 0);
	smgrextend(srel, fork, 0, (char *) page, true);
	if (wal)
		log_newpage(&srel->smgr_rnode.node, fork, 0, page, true);
	smgrimmedsync(srel, fork);
}

/* Read and lock the metapage, checking that it is one. */
static Buffer
read_meta(Relation facade, int mode)
{
	Buffer		buf;
	SpindleMetaPageData *meta;

	buf = ReadBuffer(facade, 0);
	LockBuffer(buf, mode);
	meta = SpindleMetaPageGet(BufferGetPage(buf));
	if (meta->magic != SPINDLE_META_MAGIC)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("spindle table \"%s\" has an invalid chunk map",
						RelationGetRelationName(facade))));
	return buf;
}

/*
 * Replace the whole map with entries[], WAL-logged when the facade needs
 * WAL.  The caller holds an exclusive lock on the metapage buffer.
 */
static void
meta_write(Relation facade, Buffer buf, const uint32 *entries)
{
	if (RelationNeedsWAL(facade))
	{
		GenericXLogState *state = GenericXLogStart(facade);
		Page		page = GenericXLogRegisterBuffer(state, buf, 0);

		memcpy(SpindleMetaPageGet(page)->entries, entries,
			   sizeof(uint32) * SPINDLE_NCHUNKS);
		GenericXLogFinish(state);
	}
	else
	{
		START_CRIT_SECTION();
		memcpy(SpindleMetaPageGet(BufferGetPage(buf))->entries, entries,
			   sizeof(uint32) * SPINDLE_NCHUNKS);
		MarkBufferDirty(buf);
		END_CRIT_SECTION();
	}
}

/*
 * Translate a physical TID of spindle sp into the facade's virtual TID,
 * giving the physical chunk a virtual chunk if it has none yet.  Takes and
 * releases the metapage buffer lock; the result is cached in sp->vchunk
 * (a mapping never changes while its spindle exists).
 */
void
spindle_tid_to_virtual(Relation facade, SpindleDirectory *dir,
					   SpindleEntry *sp, ItemPointer ptid, ItemPointer vtid)
{
	int16	   *cache = spindle_vchunk_cache(dir, sp);
	BlockNumber pblock = ItemPointerGetBlockNumber(ptid);
	uint32		pchunk = pblock >> SPINDLE_CHUNK_BITS;
	int			vchunk;

	if (pchunk >= SPINDLE_NCHUNKS)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("spindle %lld of table \"%s\" is larger than 1 GB",
						(long long) sp->spindle_no,
						RelationGetRelationName(facade)),
				 errhint("Lower events_per_spindle for this table.")));

	vchunk = cache[pchunk];
	if (vchunk < 0)
	{
		Buffer		buf;
		SpindleMetaPageData *meta;
		uint32		want = make_entry(sp->spindle_no, pchunk);
		int			freeslot = -1;
		int			i;

		/* Look under a share lock first: another backend may have mapped it */
		buf = read_meta(facade, BUFFER_LOCK_SHARE);
		meta = SpindleMetaPageGet(BufferGetPage(buf));
		for (i = 0; i < SPINDLE_NCHUNKS; i++)
			if (meta->entries[i] == want)
				break;
		if (i < SPINDLE_NCHUNKS)
			vchunk = i;
		else
		{
			LockBuffer(buf, BUFFER_LOCK_UNLOCK);
			LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
			meta = SpindleMetaPageGet(BufferGetPage(buf));
			for (i = 0; i < SPINDLE_NCHUNKS; i++)
			{
				if (meta->entries[i] == want)
					break;
				if (meta->entries[i] == 0 && freeslot < 0)
					freeslot = i;
			}
			if (i < SPINDLE_NCHUNKS)
				vchunk = i;
			else if (freeslot < 0)
				ereport(ERROR,
						(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
						 errmsg("spindle table \"%s\" has no free TID space",
								RelationGetRelationName(facade)),
						 errdetail("A spindle table can hold at most 1 GB of spindles that are not yet dropped."),
						 errhint("Purge events, then run spindle.drop_spindles() and VACUUM on the table.")));
			else
			{
				uint32		newentries[SPINDLE_NCHUNKS];

				memcpy(newentries, meta->entries, sizeof(newentries));
				newentries[freeslot] = want;
				meta_write(facade, buf, newentries);
				vchunk = freeslot;
			}
		}
		UnlockReleaseBuffer(buf);
		cache[pchunk] = vchunk;
	}

	ItemPointerSet(vtid,
				   ((BlockNumber) vchunk << SPINDLE_CHUNK_BITS) |
				   (pblock & (SPINDLE_CHUNK_BLOCKS - 1)),
				   ItemPointerGetOffsetNumber(ptid));
}

/*
 * Translate a virtual TID into the tag of its spindle and its physical TID.
 * Returns false when the virtual chunk is free (no event is there).
 */
bool
spindle_tid_to_physical(Relation facade, ItemPointer vtid,
						uint32 *tag, ItemPointer ptid)
{
	BlockNumber vblock = ItemPointerGetBlockNumber(vtid);
	uint32		vchunk = vblock >> SPINDLE_CHUNK_BITS;
	uint32		entry;
	Buffer		buf;

	if (vblock >= SPINDLE_VIRTUAL_BLOCKS)
		return false;

	buf = read_meta(facade, BUFFER_LOCK_SHARE);
	entry = SpindleMetaPageGet(BufferGetPage(buf))->entries[vchunk];
	UnlockReleaseBuffer(buf);

	if (entry == 0)
		return false;
	*tag = entry >> SPINDLE_PCHUNK_BITS;
	ItemPointerSet(ptid,
				   ((entry & SPINDLE_PCHUNK_MASK) << SPINDLE_CHUNK_BITS) |
				   (vblock & (SPINDLE_CHUNK_BLOCKS - 1)),
				   ItemPointerGetOffsetNumber(vtid));
	return true;
}

/*
 * Copy the whole map into entries[] (SPINDLE_NCHUNKS of them); returns how
 * many chunks are mapped.
 */
int
spindle_chunkmap_mapped(Relation facade, uint32 *entries)
{
	Buffer		buf;
	int			n = 0;
	int			i;

	buf = read_meta(facade, BUFFER_LOCK_SHARE);
	memcpy(entries, SpindleMetaPageGet(BufferGetPage(buf))->entries,
		   sizeof(uint32) * SPINDLE_NCHUNKS);
	UnlockReleaseBuffer(buf);
	for (i = 0; i < SPINDLE_NCHUNKS; i++)
		if (entries[i] != 0)
			n++;
	return n;
}

/* The physical chunk number stored in a map entry. */
uint32
spindle_entry_pchunk(uint32 entry)
{
	return entry & SPINDLE_PCHUNK_MASK;
}

/* The tag stored in a map entry (0 for a free chunk). */
uint32
spindle_entry_tag(uint32 entry)
{
	return entry >> SPINDLE_PCHUNK_BITS;
}

/*
 * Free every chunk that belongs to one of the given spindles.  The caller
 * must have removed all index entries pointing into them first, and must
 * hold ShareUpdateExclusiveLock on the facade.
 */
void
spindle_chunkmap_free_spindles(Relation facade, int64 *spindle_nos, int n)
{
	Buffer		buf;
	SpindleMetaPageData *meta;
	bool		dirty = false;
	uint32		newentries[SPINDLE_NCHUNKS];
	int			i,
				j;

	if (n == 0)
		return;
	buf = read_meta(facade, BUFFER_LOCK_EXCLUSIVE);
	meta = SpindleMetaPageGet(BufferGetPage(buf));
	memcpy(newentries, meta->entries, sizeof(newentries));
	for (i = 0; i < SPINDLE_NCHUNKS; i++)
	{
		if (newentries[i] == 0)
			continue;
		for (j = 0; j < n; j++)
			if (spindle_entry_tag(newentries[i]) == spindle_tag(spindle_nos[j]))
			{
				newentries[i] = 0;
				dirty = true;
				break;
			}
	}
	if (dirty)
		meta_write(facade, buf, newentries);
	UnlockReleaseBuffer(buf);
}

/*
 * Copy the chunk map of one facade into another facade's (fresh) metapage:
 * used when VACUUM FULL or CLUSTER give the facade new storage, so that its
 * spindles keep their TIDs.
 */
void
spindle_chunkmap_copy(Relation from, Relation to)
{
	uint32		entries[SPINDLE_NCHUNKS];
	Buffer		buf;

	spindle_chunkmap_mapped(from, entries);
	buf = read_meta(to, BUFFER_LOCK_EXCLUSIVE);
	meta_write(to, buf, entries);
	UnlockReleaseBuffer(buf);
}
