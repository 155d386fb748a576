/*-------------------------------------------------------------------------
 *
 * mapdir.c
 *	  Where each page of the slot map lives: a directory from virtual map
 *	  pages to blocks of the facade's main fork, a per-backend cache of it,
 *	  and the compaction that gives the pages of a drained backlog back.
 *
 * The slot map (slotmap.c) holds one entry per virtual slot, 1 360 to a
 * page: virtual map page vp covers slots [vp * 1360, (vp + 1) * 1360).
 * Which block holds vp's page is not computed from vp: a radix tree of
 * directory pages (2 040 block numbers each) says, whose root and height
 * the metapage holds (height 1 covers vp < 2 040, 2 below 2 040^2, 3 every
 * slot).  So a page may sit anywhere, and the pages of a drained backlog
 * can be given back whatever slots the spindles still live hold.
 *
 * Every page but the metapage carries a tag in its special space: kind
 * (map, directory, free), level (0 for a map page) and key (vp, or the
 * first vp a directory page covers).  An all-zero page is free too.
 *
 * Invariants.  (1) A block is named by at most one directory slot (or the
 * metapage's root), and a page is tagged map or directory exactly when one
 * names it, with the tag of that slot: every change of ownership (a page
 * created and linked, freed and unlinked, moved) is one generic WAL record
 * holding the parent and the page(s), so a crash between two steps leaves
 * no block owned twice and none lost.  (2) A vp without a page has no
 * entry: it reads as all empty, as a block past the end of the fork did
 * when the map was placed by slot.  (3) A mapping changes from "none" to a
 * block at any time (the first write to vp), but is removed or moved only
 * under AccessExclusiveLock on the facade (spindle_mapdir_compact).
 *
 * The cache rule.  Each backend keeps vp -> block per relfilenode.  A cached
 * block is used only once its page, locked, shows the tag (map, vp), and
 * the block is below the fork's size (the size a truncation leaves is
 * sent to every backend as an smgr invalidation, processed when it locks
 * the facade).  By (3) a mapping checked while the backend holds a lock on
 * the facade cannot change before it releases that lock; a stale entry
 * points past the end, at a free page or at a page with another tag, and
 * is dropped.  A miss is never cached.  On a standby, the startup process
 * replays moves and frees while holding the same AccessExclusiveLock
 * (logged by the primary), so the rule holds for hot standby readers too.
 *
 * Locks.  Lookups share-lock the metapage, then each directory page on the
 * path, one at a time.  Creating a page holds the metapage exclusively
 * (serialising creations), then directory pages top down exclusively, and
 * the relation extension lock while the fork grows by one block; no heap
 * page or map page is held meanwhile.  Compaction holds AccessExclusiveLock
 * on the facade (taken only if free at once) and the metapage exclusively.
 *
 * spindle_mapdir_check (for spindle.verify) checks invariant (1);
 * compaction frees or moves a page only if its parent names it, and leaves
 * one that is not named with a warning.  Test only:
 * spindle.test_map_compact_crash PANICs right after the first free or move
 * record of a compaction, once per server (085).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/generic_xlog.h"
#include "access/xlog.h"
#include "catalog/storage.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/fd.h"
#include "storage/lmgr.h"
#include "storage/smgr.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/rel.h"

#include "storage/spindle_storage.h"

#define DIR_FANOUT \
	((BLCKSZ - SPINDLE_MAP_CONTENTS_OFFSET - MAXALIGN(sizeof(SpindleMapTag))) \
	 / sizeof(BlockNumber))
#define DirSlots(page) \
	((BlockNumber *) ((char *) (page) + SPINDLE_MAP_CONTENTS_OFFSET))
#define DIR_MAX_HEIGHT	3

StaticAssertDecl((uint64) DIR_FANOUT * DIR_FANOUT * DIR_FANOUT *
				 SPINDLE_MAP_ENTRIES_PER_PAGE >= (uint64) SPINDLE_VSLOTS,
				 "three directory levels must cover every slot");

/* spindle.test_map_compact_crash (test only): PANIC after a first record */
enum
{
	COMPACT_CRASH_OFF,
	COMPACT_CRASH_AFTER_FREE,
	COMPACT_CRASH_AFTER_MOVE
};

static int	test_compact_crash = COMPACT_CRASH_OFF;

static const struct config_enum_entry compact_crash_options[] = {
	{"off", COMPACT_CRASH_OFF, false},
	{"after_free", COMPACT_CRASH_AFTER_FREE, false},
	{"after_move", COMPACT_CRASH_AFTER_MOVE, false},
	{NULL, 0, false}
};

/* Define the test-only GUC (from _PG_init). */
void
spindle_mapdir_define_gucs(void)
{
	DefineCustomEnumVariable("spindle.test_map_compact_crash",
							 "Test only: PANIC after the slot map compaction's first free or move record.",
							 NULL,
							 &test_compact_crash,
							 COMPACT_CRASH_OFF,
							 compact_crash_options,
							 PGC_SIGHUP, GUC_NOT_IN_SAMPLE,
							 NULL, NULL, NULL);
}

/*
 * The crash point: the record just written is flushed, then PANIC.  Once
 * per server: a file in the data directory says it happened (the test
 * removes it), so recovery's next compaction does not crash again.
 */
static void
maybe_crash(int after)
{
	const char *done = "spindle_test_map_compact_crash.done";
	FILE	   *f;

	if (test_compact_crash != after || access(done, F_OK) == 0)
		return;
	f = AllocateFile(done, "w");
	if (f != NULL)
		FreeFile(f);
	XLogFlush(GetXLogInsertRecPtr());
	elog(PANIC, "spindle.test_map_compact_crash: stopping after a slot map %s record",
		 after == COMPACT_CRASH_AFTER_FREE ? "free" : "move");
}

/* Map pages checked or moved between two looks for lock waiters. */
#define COMPACT_CHECK_EVERY 32

/* vps covered by one slot of a directory page of the given level */
static inline uint64
dir_span(int level)
{
	uint64		s = 1;

	while (level-- > 0)
		s *= DIR_FANOUT;
	return s;
}

/* ----------------------------------------------------------------
 * Tags and pages
 * ----------------------------------------------------------------
 */

/* The page's tag, or NULL for a free page (all zero, or tagged free). */
static SpindleMapTag *
page_tag(Page page)
{
	SpindleMapTag *tag;

	if (PageIsNew(page) ||
		((PageHeader) page)->pd_special != BLCKSZ - MAXALIGN(sizeof(SpindleMapTag)))
		return NULL;
	tag = (SpindleMapTag *) PageGetSpecialPointer(page);
	return tag->kind == SPINDLE_MAP_FREE ? NULL : tag;
}

/* Make page an empty page of the given kind (free pages: kind FREE). */
void
spindle_mapdir_init_page(Page page, uint16 kind, uint16 level, uint32 key)
{
	SpindleMapTag *tag;

	PageInit(page, BLCKSZ, sizeof(SpindleMapTag));
	tag = (SpindleMapTag *) PageGetSpecialPointer(page);
	tag->kind = kind;
	tag->level = level;
	tag->key = key;
	if (kind == SPINDLE_MAP_DIR)
		((PageHeader) page)->pd_lower = SPINDLE_MAP_CONTENTS_OFFSET +
			DIR_FANOUT * sizeof(BlockNumber);
}

/* Is the page the one the directory says it is?  Else the map is corrupt. */
static void
check_dir_page(Relation facade, Page page, BlockNumber blk, int level,
			   uint32 vp)
{
	SpindleMapTag *tag = page_tag(page);

	if (tag == NULL || tag->kind != SPINDLE_MAP_DIR || tag->level != level ||
		tag->key != vp - vp % dir_span(level))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("spindle table \"%s\" has a corrupt slot map directory at block %u",
						RelationGetRelationName(facade), blk)));
}

/* Blocks in the facade's main fork (not RelationGetNumberOfBlocks: virtual). */
static inline BlockNumber
fork_nblocks(Relation facade)
{
	return smgrnblocks(RelationGetSmgr(facade), MAIN_FORKNUM);
}

/*
 * Does block blk exist?  The size cached in the SMgrRelation is asked
 * first, so a cache hit costs no system call (see the header on why it is
 * fresh enough).
 */
static bool
block_exists(Relation facade, BlockNumber blk)
{
	SMgrRelation srel = RelationGetSmgr(facade);
	BlockNumber known = srel->smgr_cached_nblocks[MAIN_FORKNUM];

	if (known != InvalidBlockNumber && blk < known)
		return true;
	return blk < fork_nblocks(facade);
}

/* ----------------------------------------------------------------
 * The per-backend cache (see the header for the rule)
 * ----------------------------------------------------------------
 */

typedef struct MapCacheKey
{
	RelFileNode node;
	uint32		vp;
} MapCacheKey;

typedef struct MapCacheEntry
{
	MapCacheKey key;
	BlockNumber blk;
} MapCacheEntry;

#define MAP_CACHE_MAX	8192

static HTAB *map_cache = NULL;

static void
cache_key(Relation facade, uint32 vp, MapCacheKey *key)
{
	memset(key, 0, sizeof(MapCacheKey));
	key->node = facade->rd_node;
	key->vp = vp;
}

static BlockNumber
cache_get(Relation facade, uint32 vp)
{
	MapCacheKey key;
	MapCacheEntry *e;

	if (map_cache == NULL)
		return InvalidBlockNumber;
	cache_key(facade, vp, &key);
	e = hash_search(map_cache, &key, HASH_FIND, NULL);
	return e ? e->blk : InvalidBlockNumber;
}

static void
cache_set(Relation facade, uint32 vp, BlockNumber blk)
{
	MapCacheKey key;
	MapCacheEntry *e;

	(void) spindle_local_cache(&map_cache, "spindle slot map pages",
							   sizeof(MapCacheKey), sizeof(MapCacheEntry),
							   MAP_CACHE_MAX);
	cache_key(facade, vp, &key);
	if (blk == InvalidBlockNumber)
		(void) hash_search(map_cache, &key, HASH_REMOVE, NULL);
	else
	{
		e = hash_search(map_cache, &key, HASH_ENTER, NULL);
		e->blk = blk;
	}
}

/* ----------------------------------------------------------------
 * Lookups and creation
 * ----------------------------------------------------------------
 */

/*
 * The block of vp's map page by the directory, or InvalidBlockNumber if it
 * has none; then *unmapped_from (if not NULL) is the first vp of the run of
 * vps without a page that holds vp (the span of vp's zero directory slot
 * and of the zero slots just below it in the same directory page).
 */
BlockNumber
spindle_mapdir_lookup(Relation facade, uint32 vp, uint32 *unmapped_from)
{
	Buffer		buf = spindle_meta_read(facade, BUFFER_LOCK_SHARE);
	SpindleMapRoot *root = spindle_meta_map_root(BufferGetPage(buf));
	BlockNumber blk = root->root;
	int			level = (int) root->height;

	UnlockReleaseBuffer(buf);
	if (blk == 0 || vp >= dir_span(level))
	{
		if (unmapped_from)
			*unmapped_from = blk == 0 ? 0 : (uint32) dir_span(level);
		return InvalidBlockNumber;
	}
	while (level > 0)
	{
		uint64		span = dir_span(level - 1);
		int			slot = (int) ((vp / span) % DIR_FANOUT);
		BlockNumber child;

		buf = ReadBuffer(facade, blk);
		LockBuffer(buf, BUFFER_LOCK_SHARE);
		check_dir_page(facade, BufferGetPage(buf), blk, level, vp);
		child = DirSlots(BufferGetPage(buf))[slot];
		if (child == 0 && unmapped_from)
		{
			/*
			 * The zero slots just below vp's have no page either: a reader
			 * going down the vps (spindle_slotmap_last_used) skips them all
			 * at once, not one lookup per vp (turn 4, session 12: 72 buffer
			 * reads per counter rebuilt for a spindle of one event).
			 */
			while (slot > 0 && DirSlots(BufferGetPage(buf))[slot - 1] == 0)
				slot--;
			*unmapped_from = (uint32) (vp - vp % (span * DIR_FANOUT) +
									   (uint64) slot * span);
		}
		UnlockReleaseBuffer(buf);
		if (child == 0)
			return InvalidBlockNumber;
		blk = child;
		level--;
	}
	return blk;
}

/*
 * A new block at the end of the fork, zero, exclusively locked (no
 * directory slot names it yet: nobody else looks at it).
 */
static Buffer
new_block(Relation facade)
{
	Buffer		buf;

	LockRelationForExtension(facade, ExclusiveLock);
	buf = ReadBufferExtended(facade, MAIN_FORKNUM, P_NEW, RBM_NORMAL, NULL);
	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	UnlockRelationForExtension(facade, ExclusiveLock);
	return buf;
}

/*
 * Make the root tall enough for vp (the metapage, in meta, exclusively
 * locked): a first root, or a new root over the old one (its slot 0).
 * One record each.
 */
static void
grow_root(Relation facade, Buffer meta, uint32 vp)
{
	for (;;)
	{
		SpindleMapRoot *root = spindle_meta_map_root(BufferGetPage(meta));
		int			height = (int) root->height;
		BlockNumber old = root->root;
		Buffer		buf;
		GenericXLogState *state;
		Page		page;

		if (old != 0 && vp < dir_span(height))
			return;
		if (old == 0)
			for (height = 1; vp >= dir_span(height); height++)
				;
		else
			height++;
		Assert(height <= DIR_MAX_HEIGHT);
		buf = new_block(facade);
		state = GenericXLogStart(facade);
		root = spindle_meta_map_root(GenericXLogRegisterBuffer(state, meta, 0));
		page = GenericXLogRegisterBuffer(state, buf, GENERIC_XLOG_FULL_IMAGE);
		spindle_mapdir_init_page(page, SPINDLE_MAP_DIR, height, 0);
		DirSlots(page)[0] = old;
		root->root = BufferGetBlockNumber(buf);
		root->height = height;
		GenericXLogFinish(state);
		UnlockReleaseBuffer(buf);
	}
}

/*
 * The block of slot `slot` of directory page parent (exclusively locked,
 * of the given level), created if zero: a directory page one level down,
 * or vp's map page under level 1.  One record.
 */
static BlockNumber
child_or_create(Relation facade, Buffer parent, int level, uint32 vp)
{
	int			slot = (int) ((vp / dir_span(level - 1)) % DIR_FANOUT);
	BlockNumber child = DirSlots(BufferGetPage(parent))[slot];
	Buffer		buf;
	GenericXLogState *state;
	Page		page;

	if (child != 0)
		return child;
	buf = new_block(facade);
	child = BufferGetBlockNumber(buf);
	state = GenericXLogStart(facade);
	page = GenericXLogRegisterBuffer(state, parent, 0);
	DirSlots(page)[slot] = child;
	page = GenericXLogRegisterBuffer(state, buf, GENERIC_XLOG_FULL_IMAGE);
	if (level == 1)
		spindle_mapdir_init_page(page, SPINDLE_MAP_PAGE, 0, vp);
	else
		spindle_mapdir_init_page(page, SPINDLE_MAP_DIR, level - 1,
								 vp - vp % (uint32) dir_span(level - 1));
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
	return child;
}

/* vp's map page, created with the directory pages on its path if needed. */
static BlockNumber
create_page(Relation facade, uint32 vp)
{
	Buffer		meta = spindle_meta_read(facade, BUFFER_LOCK_EXCLUSIVE);
	SpindleMapRoot *root;
	BlockNumber blk;
	int			level;

	grow_root(facade, meta, vp);
	root = spindle_meta_map_root(BufferGetPage(meta));
	blk = root->root;
	level = (int) root->height;
	while (level > 0)
	{
		Buffer		buf = ReadBuffer(facade, blk);

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		check_dir_page(facade, BufferGetPage(buf), blk, level, vp);
		blk = child_or_create(facade, buf, level, vp);
		UnlockReleaseBuffer(buf);
		level--;
	}
	UnlockReleaseBuffer(meta);
	return blk;
}

/* Is the locked buffer vp's map page? */
static bool
is_page_of(Buffer buf, uint32 vp)
{
	SpindleMapTag *tag = page_tag(BufferGetPage(buf));

	return tag != NULL && tag->kind == SPINDLE_MAP_PAGE && tag->key == vp;
}

/*
 * vp's map page, locked in mode; InvalidBuffer if it has none and create
 * is false (else it is created).  The cache first, checked by the page's
 * tag (see the header).  The caller holds a lock on the facade.
 */
Buffer
spindle_mapdir_buffer(Relation facade, uint32 vp, int mode, bool create)
{
	BlockNumber blk = cache_get(facade, vp);
	Buffer		buf;

	if (blk != InvalidBlockNumber && block_exists(facade, blk))
	{
		buf = ReadBuffer(facade, blk);
		LockBuffer(buf, mode);
		if (is_page_of(buf, vp))
			return buf;
		UnlockReleaseBuffer(buf);
	}
	if (blk != InvalidBlockNumber)
		cache_set(facade, vp, InvalidBlockNumber);

	blk = spindle_mapdir_lookup(facade, vp, NULL);
	if (blk == InvalidBlockNumber)
	{
		if (!create)
			return InvalidBuffer;
		blk = create_page(facade, vp);
	}
	buf = ReadBuffer(facade, blk);
	LockBuffer(buf, mode);
	if (!is_page_of(buf, vp))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("spindle table \"%s\": slot map page %u is not at block %u",
						RelationGetRelationName(facade), vp, blk)));
	cache_set(facade, vp, blk);
	return buf;
}

/* ----------------------------------------------------------------
 * Compaction (under AccessExclusiveLock on the facade)
 * ----------------------------------------------------------------
 */

/* The tag of block blk, copied, or kind FREE. */
static SpindleMapTag
read_tag(Relation facade, BlockNumber blk, int *used)
{
	Buffer		buf = ReadBuffer(facade, blk);
	SpindleMapTag *tag;
	SpindleMapTag copy = {0, SPINDLE_MAP_FREE, 0};

	LockBuffer(buf, BUFFER_LOCK_SHARE);
	tag = page_tag(BufferGetPage(buf));
	if (tag != NULL)
		copy = *tag;
	if (used)
		*used = tag == NULL ? 0 : spindle_map_used(BufferGetPage(buf));
	UnlockReleaseBuffer(buf);
	return copy;
}

/*
 * The parent of the page tagged (level, key): the directory page one level
 * up, exclusively locked, and the slot that names the page in *slot; or
 * meta itself (the caller's, exclusively locked) for the root, *slot -1;
 * InvalidBuffer if the directory has no such place (a corrupt tag).
 */
static Buffer
parent_of(Relation facade, Buffer meta, int level, uint32 key, int *slot)
{
	SpindleMapRoot *root = spindle_meta_map_root(BufferGetPage(meta));
	BlockNumber blk = root->root;
	int			l = (int) root->height;

	*slot = -1;
	if (l == level)
		return meta;
	while (l > level)
	{
		Buffer		buf;

		if (blk == 0)
			break;
		buf = ReadBuffer(facade, blk);

		LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
		check_dir_page(facade, BufferGetPage(buf), blk, l, key);
		*slot = (int) ((key / dir_span(l - 1)) % DIR_FANOUT);
		if (l == level + 1)
			return buf;
		blk = DirSlots(BufferGetPage(buf))[*slot];
		UnlockReleaseBuffer(buf);
		l--;
	}
	return InvalidBuffer;
}

/*
 * Does the parent's slot (or the root) name blk?  A page whose tag says it
 * is named where it is not (corruption: spindle.verify reports it) is
 * neither freed nor moved; a warning says so, and VACUUM goes on.
 */
static bool
check_named(Relation facade, Buffer parent, int slot, BlockNumber blk)
{
	if (BufferIsValid(parent))
	{
		Page		page = BufferGetPage(parent);
		BlockNumber named = slot < 0 ? spindle_meta_map_root(page)->root :
			DirSlots(page)[slot];

		if (named == blk)
			return true;
	}
	ereport(WARNING,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("spindle table \"%s\": slot map page at block %u is not in the map's directory",
					RelationGetRelationName(facade), blk),
			 errdetail("The page is neither freed nor moved."),
			 errhint("Run spindle.verify() on the table.")));
	return false;
}

/* Point the parent's slot (or the root) at blk, on its registered copy. */
static void
set_parent(Page parent, int slot, BlockNumber blk)
{
	if (slot < 0)
	{
		SpindleMapRoot *root = spindle_meta_map_root(parent);

		root->root = blk;
		if (blk == 0)
			root->height = 0;
	}
	else
		DirSlots(parent)[slot] = blk;
}

/* Is the directory page (locked) without any child? */
static bool
dir_empty(Page page)
{
	int			i;

	for (i = 0; i < (int) DIR_FANOUT; i++)
		if (DirSlots(page)[i] != 0)
			return false;
	return true;
}

/*
 * Free block blk (tagged tag) if it holds nothing: a map page without
 * entries, a directory page without children.  One record: the parent's
 * slot zeroed, the page tagged free.  Returns whether it was freed.
 */
static bool
free_if_empty(Relation facade, Buffer meta, BlockNumber blk, SpindleMapTag tag)
{
	int			slot;
	Buffer		parent = parent_of(facade, meta, tag.level, tag.key, &slot);
	Buffer		buf = ReadBuffer(facade, blk);
	Page		page;
	bool		empty;
	GenericXLogState *state;

	LockBuffer(buf, BUFFER_LOCK_EXCLUSIVE);
	page = BufferGetPage(buf);
	empty = tag.kind == SPINDLE_MAP_PAGE ? spindle_map_used(page) == 0 :
		dir_empty(page);
	if (empty && !check_named(facade, parent, slot, blk))
		empty = false;
	if (empty)
	{
		state = GenericXLogStart(facade);
		set_parent(GenericXLogRegisterBuffer(state, parent, 0), slot, 0);
		spindle_mapdir_init_page(GenericXLogRegisterBuffer(state, buf, 0),
								 SPINDLE_MAP_FREE, 0, 0);
		GenericXLogFinish(state);
		maybe_crash(COMPACT_CRASH_AFTER_FREE);
	}
	UnlockReleaseBuffer(buf);
	if (BufferIsValid(parent) && parent != meta)
		UnlockReleaseBuffer(parent);
	return empty;
}

/*
 * Move the page in block from (tagged tag) to block to (free): the copy,
 * the parent's slot and the old block freed in one record.  False if the
 * page is not where the directory says (nothing done).
 */
static bool
move_page(Relation facade, Buffer meta, BlockNumber from, BlockNumber to,
		  SpindleMapTag tag)
{
	int			slot;
	Buffer		parent = parent_of(facade, meta, tag.level, tag.key, &slot);
	Buffer		src = ReadBuffer(facade, from);
	Buffer		dst = ReadBuffer(facade, to);
	GenericXLogState *state;
	Page		spage;

	LockBuffer(src, BUFFER_LOCK_EXCLUSIVE);
	LockBuffer(dst, BUFFER_LOCK_EXCLUSIVE);
	if (!check_named(facade, parent, slot, from))
	{
		UnlockReleaseBuffer(dst);
		UnlockReleaseBuffer(src);
		if (BufferIsValid(parent) && parent != meta)
			UnlockReleaseBuffer(parent);
		return false;
	}
	state = GenericXLogStart(facade);
	set_parent(GenericXLogRegisterBuffer(state, parent, 0), slot, to);
	spage = GenericXLogRegisterBuffer(state, src, 0);
	memcpy(GenericXLogRegisterBuffer(state, dst, GENERIC_XLOG_FULL_IMAGE),
		   spage, BLCKSZ);
	spindle_mapdir_init_page(spage, SPINDLE_MAP_FREE, 0, 0);
	GenericXLogFinish(state);
	maybe_crash(COMPACT_CRASH_AFTER_MOVE);
	UnlockReleaseBuffer(dst);
	UnlockReleaseBuffer(src);
	if (BufferIsValid(parent) && parent != meta)
		UnlockReleaseBuffer(parent);
	return true;
}

/* Has anyone queued behind our lock?  Looked at every so many steps. */
static bool
waiters(Relation facade, int *steps)
{
	return ++(*steps) % COMPACT_CHECK_EVERY == 0 &&
		LockHasWaitersRelation(facade, AccessExclusiveLock);
}

/*
 * Free every page holding nothing: map pages first, then directory pages
 * level by level upwards (freeing children may empty them).  False if it
 * stopped for a lock waiter.
 */
static bool
free_empty_pages(Relation facade, Buffer meta, BlockNumber nblocks, int *steps)
{
	int			level;
	BlockNumber blk;

	for (level = 0; level <= DIR_MAX_HEIGHT; level++)
	{
		for (blk = 1; blk < nblocks; blk++)
		{
			int			used;
			SpindleMapTag tag = read_tag(facade, blk, &used);

			CHECK_FOR_INTERRUPTS();
			/* every block counts as a step: a pass reads them all */
			if (waiters(facade, steps))
				return false;
			if (tag.kind == SPINDLE_MAP_FREE || tag.level != level)
				continue;
			if (tag.kind == SPINDLE_MAP_PAGE && used > 0)
				continue;
			(void) free_if_empty(facade, meta, blk, tag);
		}
	}
	return true;
}

/*
 * Move the pages at the end of the fork into the free blocks lowest down,
 * while there are any below them; returns the number of blocks the fork
 * needs (all past it are free).
 */
static BlockNumber
move_down(Relation facade, Buffer meta, BlockNumber nblocks, int *steps,
		  bool *stopped)
{
	BlockNumber lo = 1;
	BlockNumber hi = nblocks;

	for (;;)
	{
		SpindleMapTag tag = {0, SPINDLE_MAP_FREE, 0};

		CHECK_FOR_INTERRUPTS();
		while (hi > 1 &&
			   (tag = read_tag(facade, hi - 1, NULL)).kind == SPINDLE_MAP_FREE)
			hi--;
		while (lo < hi - 1 &&
			   read_tag(facade, lo, NULL).kind != SPINDLE_MAP_FREE)
			lo++;
		if (hi <= 1 || lo >= hi - 1)
			return hi;
		if (waiters(facade, steps))
		{
			*stopped = true;
			return hi;
		}
		if (!move_page(facade, meta, hi - 1, lo, tag))
			return hi;
		hi--;
		lo++;
	}
}

/*
 * Idle pages (free blocks and map pages without entries) that make a
 * compaction worth its lock when the last block is busy, and the share of
 * the fork they must be.
 */
#define COMPACT_MIN_IDLE	16
#define COMPACT_MIN_SHARE	4	/* at least 1/4 of the fork */

/*
 * Is compaction worth AccessExclusiveLock: is the last block idle (a
 * truncation at least, as when only the tail went back), or are enough
 * pages idle elsewhere?  In a steady queue the pages of a retired range
 * are soon written again by the spindles that reuse it (ranges are taken
 * lowest first), so a few idle pages are left for them rather than freed
 * and made again.  A look without the lock, share-locking each page.
 */
static bool
worth_compacting(Relation facade, BlockNumber nblocks)
{
	BlockNumber blk;
	BlockNumber idle = 0;

	for (blk = 1; blk < nblocks; blk++)
	{
		int			used;
		SpindleMapTag tag = read_tag(facade, blk, &used);

		if (tag.kind == SPINDLE_MAP_FREE ||
			(tag.kind == SPINDLE_MAP_PAGE && used == 0))
		{
			if (blk == nblocks - 1)
				return true;
			idle++;
		}
	}
	return idle >= COMPACT_MIN_IDLE &&
		idle >= (nblocks - 1) / COMPACT_MIN_SHARE;
}

/*
 * Facades whose last compaction in this backend was worth doing but did
 * not finish: its lock was not free after ranges were retired, or someone
 * queued behind it.  Their
 * next call looks at every page again even if nothing was retired since
 * (else a compaction cut short by a producer waited for the next
 * retirement, which a drained backlog may not see for long).  A few
 * entries per backend: the worker of one database, maintenance callers.
 */
#define COMPACT_UNFINISHED_MAX	64
static Oid	compact_unfinished[COMPACT_UNFINISHED_MAX];
static int	compact_nunfinished = 0;

/* Take relid off the list; true if it was on it. */
static bool
unfinished_take(Oid relid)
{
	for (int i = 0; i < compact_nunfinished; i++)
		if (compact_unfinished[i] == relid)
		{
			compact_unfinished[i] = compact_unfinished[--compact_nunfinished];
			return true;
		}
	return false;
}

/* Put relid on the list (the oldest entry goes when it is full). */
static void
unfinished_add(Oid relid)
{
	if (compact_nunfinished == COMPACT_UNFINISHED_MAX)
	{
		memmove(compact_unfinished, compact_unfinished + 1,
				sizeof(Oid) * (COMPACT_UNFINISHED_MAX - 1));
		compact_nunfinished--;
	}
	compact_unfinished[compact_nunfinished++] = relid;
}

/*
 * Give back the map pages that hold no entry, wherever they are: free
 * them, move the pages at the end of the fork into the free blocks lowest
 * down, and truncate the free tail.  Returns the number of blocks given
 * back.
 *
 * As VACUUM truncates a heap: under AccessExclusiveLock on the facade,
 * taken only if it can be at once (never waits for a producer or reader),
 * given up between steps as soon as anybody queues behind it, released as
 * soon as the work is done.  Each free and each move is one generic WAL
 * record (invariant 1 in the header); the truncation is RelationTruncate's
 * XLOG_SMGR_TRUNCATE.  The caller holds at least AccessShareLock on the
 * facade and no pin on its pages, in a transaction that may take an xid.
 * Without look_all (nothing was retired since the last call) only a fork
 * whose last block is idle is looked at further: one page read, instead of
 * every page of the map each worker round (review of the directory,
 * finding 1); unless this backend's last compaction of the facade was cut
 * short (compact_unfinished), which is then taken up again without a
 * second look.
 */
BlockNumber
spindle_mapdir_compact(Relation facade, bool look_all)
{
	Oid			relid = RelationGetRelid(facade);
	BlockNumber nblocks = fork_nblocks(facade);
	BlockNumber keep;
	Buffer		meta;
	int			steps = 0;
	bool		stopped = false;
	bool		retry = unfinished_take(relid);

	if (nblocks <= 1)
		return 0;
	if (!look_all && !retry)
	{
		/* nothing retired since the last look: only an idle tail counts */
		int			used;
		SpindleMapTag tag = read_tag(facade, nblocks - 1, &used);

		if (!(tag.kind == SPINDLE_MAP_FREE ||
			  (tag.kind == SPINDLE_MAP_PAGE && used == 0)))
			return 0;
	}
	/* a retry was found worth it: go straight for the lock */
	if (!retry && !worth_compacting(facade, nblocks))
		return 0;
	if (!ConditionalLockRelation(facade, AccessExclusiveLock))
	{
		/* pages a retirement emptied wait for it: try again next time */
		if (look_all || retry)
			unfinished_add(relid);
		return 0;
	}
	nblocks = fork_nblocks(facade);
	meta = spindle_meta_read(facade, BUFFER_LOCK_EXCLUSIVE);
	keep = nblocks;
	if (free_empty_pages(facade, meta, nblocks, &steps))
		keep = move_down(facade, meta, nblocks, &steps, &stopped);
	else
		stopped = true;
	if (stopped)
		unfinished_add(relid);
	UnlockReleaseBuffer(meta);
	if (keep < nblocks)
	{
		RelationTruncate(facade, keep);
		ereport(DEBUG1,
				(errmsg_internal("spindle table \"%s\": slot map truncated from %u to %u pages",
								 RelationGetRelationName(facade),
								 nblocks, keep)));
	}
	UnlockRelation(facade, AccessExclusiveLock);
	return nblocks - keep;
}

/* Is block blk of the facade's main fork free?  (For copies.) */
bool
spindle_mapdir_block_free(Page page)
{
	return page_tag(page) == NULL;
}

/* ----------------------------------------------------------------
 * Checking the directory (spindle.verify)
 * ----------------------------------------------------------------
 */

typedef struct DirCheck
{
	Relation	facade;
	BlockNumber nscanned;		/* blocks when the tags were listed */
	bool	   *tagged;			/* tagged map or directory then */
	BlockNumber nblocks;		/* size of named[] */
	bool	   *named;			/* named by the directory */
	spindle_mapdir_report report;
	void	   *arg;
} DirCheck;

/* Is blk in the fork?  (Made since the last look: grow named[].) */
static bool
check_in_fork(DirCheck *c, BlockNumber blk)
{
	BlockNumber n;

	if (blk < c->nblocks)
		return true;
	n = fork_nblocks(c->facade);
	if (blk >= n)
		return false;
	c->named = repalloc(c->named, sizeof(bool) * n);
	memset(c->named + c->nblocks, 0, sizeof(bool) * (n - c->nblocks));
	c->nblocks = n;
	return true;
}

/* Check the page named at blk (expected: level, key) and its subtree. */
static void
check_subtree(DirCheck *c, BlockNumber blk, int level, uint32 key)
{
	Buffer		buf;
	SpindleMapTag *tag;
	BlockNumber *children = NULL;
	int			i;

	CHECK_FOR_INTERRUPTS();
	if (blk == 0 || !check_in_fork(c, blk) || c->named[blk])
	{
		c->report(c->arg, psprintf("slot map directory: block %u is named %s",
								   blk, blk == 0 ? "(the metapage)" :
								   blk >= c->nblocks ? "past the end of the fork" :
								   "twice"));
		return;
	}
	c->named[blk] = true;
	buf = ReadBuffer(c->facade, blk);
	LockBuffer(buf, BUFFER_LOCK_SHARE);
	tag = page_tag(BufferGetPage(buf));
	if (tag == NULL || tag->level != level || tag->key != key ||
		tag->kind != (level == 0 ? SPINDLE_MAP_PAGE : SPINDLE_MAP_DIR))
		c->report(c->arg, psprintf("slot map directory: block %u is named for level %d, key %u, but is %s",
								   blk, level, key,
								   tag == NULL ? "free" :
								   psprintf("tagged kind %u, level %u, key %u",
											tag->kind, tag->level, tag->key)));
	else if (level > 0)
	{
		children = palloc(sizeof(BlockNumber) * DIR_FANOUT);
		memcpy(children, DirSlots(BufferGetPage(buf)),
			   sizeof(BlockNumber) * DIR_FANOUT);
	}
	UnlockReleaseBuffer(buf);
	if (children == NULL)
		return;
	for (i = 0; i < (int) DIR_FANOUT; i++)
		if (children[i] != 0)
			check_subtree(c, children[i], level - 1,
						  key + (uint32) (i * dir_span(level - 1)));
	pfree(children);
}

/*
 * Check the directory of the facade's map: every block it names exists,
 * once, with the tag its place says; every page tagged map or directory is
 * named.  Problems go to report.  The caller holds AccessShareLock on the
 * facade: pages may be made meanwhile (never freed nor moved: that takes
 * AccessExclusiveLock), and a page is tagged in the same record that names
 * it, so the tagged pages are listed first and the tree walked after.
 */
void
spindle_mapdir_check(Relation facade, spindle_mapdir_report report, void *arg)
{
	DirCheck	c;
	Buffer		meta;
	SpindleMapRoot root;
	BlockNumber blk;

	c.facade = facade;
	c.report = report;
	c.arg = arg;
	c.nscanned = fork_nblocks(facade);
	c.tagged = palloc0(sizeof(bool) * Max(c.nscanned, 1));
	for (blk = 1; blk < c.nscanned; blk++)
		c.tagged[blk] = read_tag(facade, blk, NULL).kind != SPINDLE_MAP_FREE;
	c.nblocks = c.nscanned;
	c.named = palloc0(sizeof(bool) * Max(c.nblocks, 1));

	meta = spindle_meta_read(facade, BUFFER_LOCK_SHARE);
	root = *spindle_meta_map_root(BufferGetPage(meta));
	UnlockReleaseBuffer(meta);
	if (root.root != 0)
		check_subtree(&c, root.root, (int) root.height, 0);
	for (blk = 1; blk < c.nscanned; blk++)
		if (c.tagged[blk] && !c.named[blk])
			report(arg, psprintf("slot map directory: block %u is a map or directory page the directory does not name",
								 blk));
	pfree(c.named);
	pfree(c.tagged);
}

/*
 * For the tests of verify (spindle._verify_corrupt 'map_orphan'): a new
 * block tagged as the map page of vslot's vp, which the directory does not
 * name.  Lookups never see it; verify reports it.
 */
void
spindle_mapdir_test_orphan(Relation facade, int64 vslot)
{
	Buffer		buf = new_block(facade);
	GenericXLogState *state = GenericXLogStart(facade);

	spindle_mapdir_init_page(GenericXLogRegisterBuffer(state, buf,
													   GENERIC_XLOG_FULL_IMAGE),
							 SPINDLE_MAP_PAGE, 0,
							 (uint32) (vslot / SPINDLE_MAP_ENTRIES_PER_PAGE));
	GenericXLogFinish(state);
	UnlockReleaseBuffer(buf);
}
