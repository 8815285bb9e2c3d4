/* Helpers shared by the XDP programs. */
#ifndef DIRECTOR_CSUM_H
#define DIRECTOR_CSUM_H

#include <linux/types.h>

/* csum_fold folds a one's complement sum of 16-bit words to 16 bits. */
static __always_inline __u16 csum_fold(__u32 s)
{
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return s;
}

/* ipv4_csum is the checksum of a 20-byte IPv4 header whose checksum field
 * is zero. */
static __always_inline __u16 ipv4_csum(const void *hdr)
{
	const __u16 *p = hdr;
	__u32 s = 0;
#pragma unroll
	for (int i = 0; i < 10; i++)
		s += p[i];
	return ~csum_fold(s);
}

/* bounded16 is a 16-bit value the compiler and the verifier both take as
 * one: a byte swap's result goes through it before any use in pointer
 * arithmetic. Linux 6.1 and 6.12: their verifiers do not bound the result
 * of a byte swap (the mask, which the compiler would drop, stays because
 * the empty asm hides what it knows of v). */
static __always_inline __u32 bounded16(__u32 v)
{
	asm volatile("" : "+r"(v));
	return v & 0xffff;
}

#endif
