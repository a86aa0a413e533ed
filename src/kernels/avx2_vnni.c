/*
 * The AVX2 kernels again, for CPUs with AVX-VNNI: avx2.c built with
 * IX_AVX2_VNNI = 1 (and -mavxvnni), which swaps its vpmaddubsw + vpmaddwd
 * products for vpdpbusd and names the table "avx2-vnni". One source, so the
 * two tables cannot drift apart; dispatch.c picks this one when the CPU
 * probe reports AVX-VNNI.
 */
#define IX_AVX2_VNNI 1
#include "avx2.c"
