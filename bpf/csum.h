/* Helpers shared by the XDP programs. */
#ifndef DIRECTOR_CSUM_H
#define DIRECTOR_CSUM_H

#include <linux/types.h>

/* ipv4_csum is the checksum of a 20-byte IPv4 header whose checksum field
 * is zero. */
static __always_inline __u16 ipv4_csum(const void *hdr)
{
	const __u16 *p = hdr;
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += p[i];
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return ~s;
}

#endif
