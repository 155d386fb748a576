/*-------------------------------------------------------------------------
 *
 * publication.h
 *	  Keeping spindle tables and their spindles out of logical replication
 *	  publications (publication.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef SPINDLE_PUBLICATION_H
#define SPINDLE_PUBLICATION_H

extern void spindle_publication_init(void);

#endif							/* SPINDLE_PUBLICATION_H */
