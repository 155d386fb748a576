/*-------------------------------------------------------------------------
 *
 * local_cache.c
 *	  Bounded per-backend hash tables for what a backend remembers of the
 *	  relations it touched: the slot map's page cache (mapdir.c) and the
 *	  consumer relations' reservation hints (consumer_page.c).
 *
 * Such a table lives in TopMemoryContext, is made on first use and is
 * forgotten all at once when it holds its maximum of entries, so a backend
 * that touches many relations keeps a bounded amount of memory.  What it
 * holds are hints that the caller checks against the disk before relying
 * on them: losing them costs reads, never correctness.
 *
 * Locks: none (backend-local memory).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "utils/hsearch.h"
#include "utils/memutils.h"

#include "storage/spindle_storage.h"

/*
 * The table *cache (named name, with keys of keysize bytes compared as
 * blobs and entries of entrysize bytes): made if absent, made afresh (all
 * entries forgotten) once it holds max entries.
 */
HTAB *
spindle_local_cache(HTAB **cache, const char *name, Size keysize,
					Size entrysize, long max)
{
	if (*cache != NULL && hash_get_num_entries(*cache) >= max)
	{
		hash_destroy(*cache);
		*cache = NULL;
	}
	if (*cache == NULL)
	{
		HASHCTL		ctl;

		ctl.keysize = keysize;
		ctl.entrysize = entrysize;
		ctl.hcxt = TopMemoryContext;
		*cache = hash_create(name, 256, &ctl,
							 HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	return *cache;
}
