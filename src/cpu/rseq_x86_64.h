/*
 * The per-CPU backend's restartable sequences, x86-64 (included by cpu.h,
 * used by pcpu.c and the inline fast paths). The only assembly of the
 * backend: each sequence reads the CPU number from this thread's rseq area
 * (glibc's registration: cpu_id at %fs + __rseq_offset + 4), indexes
 * that CPU's part (pcpu.c reserves an area for every CPU number the
 * kernel can give, and two empty ones below CPU 0's that the -1 and -2 of
 * a thread rseq does not know index, sign-extended: no part there, so the
 * thread-local path, with no compare of the number on the way) and
 * ends in one store, its commit. If the thread is preempted, migrated or
 * signalled before the commit, the kernel moves it to the abort handler,
 * which starts the sequence again from the top; nothing before the commit
 * is visible to anyone (the only earlier store, a push's objs[n], is above
 * the count that would show it).
 *
 * A sequence is described to the kernel by a struct rseq_cs (version,
 * flags, start, length up to the commit, abort address) in the __rseq_cs
 * section, which the sequence stores into the area's rseq_cs field before
 * it starts; the kernel clears that field when it restarts one. The abort
 * handler is preceded by RSEQ_SIG (as a disassembler-harmless ud1 with
 * the signature as its operand), which the kernel checks before jumping
 * there. Abort handlers live in their own section, out of the fast paths'
 * way.
 *
 * The part's commit word (struct cpu_cache's pcpu_nc) is n (bits 0-15,
 * objects in main), room (bits 16-31, main's capacity less n; 0 while a
 * slow path holds the part, "closed") and ops (bits 32-63, pops and
 * pushes, for the statistics and KFENCE's look at the clock). A pop needs
 * n > 0, a push room > 0 (one test of the word, no compare of two fields);
 * each commits with one add whose carry or borrow moves the other fields:
 * a pop adds 2^32 + 2^16 - 1 (n - 1, room + 1, ops + 1), a push 2^32 -
 * 2^16 + 1 (n + 1, room - 1, ops + 1). So a closed part (n = room = 0)
 * refuses both: its owner can change main at leisure.
 *
 * Another architecture follows by providing the same six sequences (pop,
 * push, their bulk forms, close, cpu): on aarch64 the CPU number is loaded from the area
 * at tpidr_el0 + __rseq_offset, the commit is a single str, the signature
 * is a udf #imm16 pair (RSEQ_SIG 0xd428bc00, as glibc and the kernel's
 * selftests use) and the rest is the same shape. Without one, cpu.h
 * turns the backend off (PCPU_ARCH 0) and the thread-local backend runs.
 */
#ifndef USLAB_RSEQ_X86_64_H
#define USLAB_RSEQ_X86_64_H

#define PCPU_ARCH 1
#define PCPU_RSEQ_SIG 0x53053053

/* The descriptor (label 3), the signature and the abort handler (label 4,
 * back to the top, label 5), then the rseq_cs store; the sequence proper
 * starts at label 1 and commits at label 2. */
#define PCPU_SEQ_BEGIN(tmp, rs) \
	".pushsection __rseq_cs, \"aw\"\n\t" \
	".balign 32\n\t" \
	"3:\n\t" \
	".long 0, 0\n\t" \
	".quad 1f, 2f - 1f, 4f\n\t" \
	".popsection\n\t" \
	".pushsection __rseq_cs_ptr_array, \"aw\"\n\t" \
	".quad 3b\n\t" \
	".popsection\n\t" \
	".pushsection .text.uslab_rseq_abort, \"ax\"\n\t" \
	".byte 0x0f, 0xb9, 0x3d\n\t" \
	".long 0x53053053\n\t" \
	"4:\n\t" \
	"jmp 5f\n\t" \
	".popsection\n\t" \
	"5:\n\t" \
	"leaq 3b(%%rip), " tmp "\n\t" \
	"movq " tmp ", %%fs:8(" rs ")\n\t" \
	"1:\n\t"

/* The sequences' first steps, after PCPU_SEQ_BEGIN: this CPU's number
 * (through %[t]), then its part into %[c_] (a register operand's name);
 * to `fail_` (an asm jump target) if the CPU has no part there (also
 * the case of a thread rseq does not know). Uses the operands rs, sh, sl
 * and t. */
#define PCPU_SEQ_PART(c_, fail_) \
	"movslq %%fs:4(%[rs]), %[t]\n\t"    /* cpu_id: -1, -2 index the empty areas below CPU 0's */ \
	"shlq %[sh], %[t]\n\t" \
	"movq (%[sl], %[t]), %[" c_ "]\n\t"  /* this CPU's part */ \
	"testq %[" c_ "], %[" c_ "]\n\t" \
	"jz " fail_ "\n\t"

/* This thread's CPU now (outside any sequence: a hint, it may change):
 * the area's cpu_id, which is -1 or -2 for a thread rseq does not know. */
static inline unsigned pcpu_arch_cpu(long rseq_off)
{
	unsigned cpu;
	__asm__ volatile("movl %%fs:4(%1), %0" : "=r"(cpu) : "r"(rseq_off));
	return cpu;
}

/*
 * Pop from the part at *(slot + (cpu << shift)) of this CPU: returns the
 * object, with the part and the new commit word in *cp and *ncp. Goes to
 * `nopart` when this CPU has no part there, to `empty` when its main is
 * empty (or closed).
 */
#define PCPU_ARCH_POP(x_, c_, nc_, slot_, rseq_off_, shift_, nc_off_, objs_off_, nopart, empty) \
	do { \
		uint64_t pcpu_t_; \
		__asm__ volatile goto(PCPU_SEQ_BEGIN("%[t]", "%[rs]") \
			     PCPU_SEQ_PART("c", "%l[" #nopart "]") \
			     "movq %c[nco](%[c]), %[nc]\n\t" \
			     "movzwl %w[nc], %k[t]\n\t"           /* n */ \
			     "testl %k[t], %k[t]\n\t" \
			     "jz %l[" #empty "]\n\t" \
			     "movq %c[obo](%[c]), %[x]\n\t" \
			     "movq -8(%[x], %[t], 8), %[x]\n\t"   /* objs[n - 1] */ \
			     "movabsq $0x10000ffff, %[t]\n\t"     /* n - 1 (its borrow: room + 1), ops + 1 */ \
			     "addq %[t], %[nc]\n\t" \
			     "movq %[nc], %c[nco](%[c])\n\t"      /* commit */ \
			     "2:\n\t" \
			     : [x] "=&r"(x_), [c] "=&r"(c_), [nc] "=&r"(nc_), [t] "=&r"(pcpu_t_) \
			     : [rs] "r"(rseq_off_), [sl] "r"(slot_), [sh] "i"(shift_), \
			       [nco] "i"(nc_off_), [obo] "i"(objs_off_) \
			     : "memory", "cc" \
			     : nopart, empty); \
	} while (0)

/*
 * Push x onto this CPU's part: objs[n] = x, then the commit. Goes to
 * `fail` without a store when this CPU has no part there or its main is
 * full (room 0, also a closed part).
 */
#define PCPU_ARCH_PUSH(x_, slot_, rseq_off_, shift_, nc_off_, objs_off_, fail) \
	do { \
		uint64_t pcpu_t_, pcpu_u_, pcpu_v_, pcpu_nc_; \
		__asm__ volatile goto(PCPU_SEQ_BEGIN("%[t]", "%[rs]") \
			     PCPU_SEQ_PART("t", "%l[" #fail "]") \
			     "movq %c[nco](%[t]), %[nc]\n\t" \
			     "testl $0xffff0000, %k[nc]\n\t"     /* room */ \
			     "jz %l[" #fail "]\n\t" \
			     "movzwl %w[nc], %k[u]\n\t" \
			     "movq %c[obo](%[t]), %[v]\n\t" \
			     "movq %[x], (%[v], %[u], 8)\n\t"     /* objs[n] = x */ \
			     "movl $0xffff0001, %k[u]\n\t"       /* n + 1, room - 1 (its carry: ops + 1) */ \
			     "addq %[u], %[nc]\n\t" \
			     "movq %[nc], %c[nco](%[t])\n\t"      /* commit */ \
			     "2:\n\t" \
			     : [t] "=&r"(pcpu_t_), [u] "=&r"(pcpu_u_), [v] "=&r"(pcpu_v_), [nc] "=&r"(pcpu_nc_) \
			     : [x] "r"(x_), [rs] "r"(rseq_off_), [sl] "r"(slot_), [sh] "i"(shift_), \
			       [nco] "i"(nc_off_), [obo] "i"(objs_off_) \
			     : "memory", "cc" \
			     : fail); \
	} while (0)

/*
 * Bulk pop: k = min(n, want) objects off the top of this CPU's main into
 * out[0 .. k - 1] (the top first, as k single pops would), then the commit
 * (n - k, ops + k). The copy writes only the caller's array, so a restart
 * simply copies again. k is 0 (no store) when this CPU has no part there,
 * its main is empty (or closed), or want is 0; c is the part when k > 0.
 * No asm goto here: the failures leave the sequence for a block after
 * its end that sets k = 0, so that no output has to be valid on a jump's
 * path (GCC 12 returned a stale register for k on such a path). Nothing
 * may sit between the commit and the end (label 2): the kernel restarts
 * a sequence interrupted anywhere before the end, and a restart after the
 * commit would take k objects twice.
 */
#define PCPU_ARCH_POP_N(k_, c_, out_, want_, slot_, rseq_off_, shift_, nc_off_, objs_off_) \
	do { \
		uint64_t pcpu_p_, pcpu_j_, pcpu_x_, pcpu_nc_; \
		__asm__ volatile(PCPU_SEQ_BEGIN("%[t]", "%[rs]") \
			     PCPU_SEQ_PART("c", "7f") \
			     "movq %c[nco](%[c]), %[nc]\n\t" \
			     "movzwl %w[nc], %k[t]\n\t"           /* n */ \
			     "cmpq %[want], %[t]\n\t" \
			     "cmovaq %[want], %[t]\n\t"           /* k = min(n, want) */ \
			     "testq %[t], %[t]\n\t" \
			     "jz 2f\n\t" \
			     "movzwl %w[nc], %k[j]\n\t" \
			     "movq %c[obo](%[c]), %[p]\n\t" \
			     "leaq (%[p], %[j], 8), %[p]\n\t"    /* &objs[n] */ \
			     "xorl %k[j], %k[j]\n\t" \
			     "6:\n\t" \
			     "movq -8(%[p]), %[x]\n\t"             /* objs[n - 1 - j] */ \
			     "movq %[x], (%[out], %[j], 8)\n\t"   /* out[j] */ \
			     "subq $8, %[p]\n\t" \
			     "incq %[j]\n\t" \
			     "cmpq %[t], %[j]\n\t" \
			     "jb 6b\n\t" \
			     "movabsq $0x10000ffff, %[x]\n\t" \
			     "imulq %[t], %[x]\n\t"               /* ops + k, room + k, n - k */ \
			     "addq %[x], %[nc]\n\t" \
			     "movq %[nc], %c[nco](%[c])\n\t"      /* commit: the sequence's last instruction */ \
			     "2:\n\t" \
			     "jmp 8f\n\t" \
			     "7:\n\t"                              /* (outside the sequence) */ \
			     "xorl %k[t], %k[t]\n\t"              /* no part: k = 0 */ \
			     "8:\n\t" \
			     : [t] "=&r"(k_), [c] "=&r"(c_), [p] "=&r"(pcpu_p_), [j] "=&r"(pcpu_j_), \
			       [x] "=&r"(pcpu_x_), [nc] "=&r"(pcpu_nc_) \
			     : [out] "r"(out_), [want] "r"(want_), [rs] "r"(rseq_off_), [sl] "r"(slot_), [sh] "i"(shift_), \
			       [nco] "i"(nc_off_), [obo] "i"(objs_off_) \
			     : "memory", "cc"); \
	} while (0)

/*
 * Bulk push: k = min(room, nr) objects of in[] onto this CPU's main at
 * objs[n ..], then the commit (n + k, ops + k). The stores above n are
 * invisible until the commit shows them, as the single push's one. k is 0
 * (no store) when this CPU has no part there, its main is full (or
 * closed), or nr is 0; c is the part when k > 0. No asm goto, as above.
 */
#define PCPU_ARCH_PUSH_N(k_, c_, in_, nr_, slot_, rseq_off_, shift_, nc_off_, objs_off_) \
	do { \
		uint64_t pcpu_t_, pcpu_p_, pcpu_j_, pcpu_x_, pcpu_nc_; \
		__asm__ volatile(PCPU_SEQ_BEGIN("%[t]", "%[rs]") \
			     PCPU_SEQ_PART("c", "7f") \
			     "movq %c[nco](%[c]), %[nc]\n\t" \
			     "movl %k[nc], %k[u]\n\t" \
			     "shrl $16, %k[u]\n\t"                /* room */ \
			     "jz 7f\n\t" \
			     "movzwl %w[nc], %k[t]\n\t"           /* n */ \
			     "cmpq %[nr], %[u]\n\t" \
			     "cmovaq %[nr], %[u]\n\t"             /* k = min(room, nr) */ \
			     "testq %[u], %[u]\n\t" \
			     "jz 2f\n\t" \
			     "movq %c[obo](%[c]), %[p]\n\t" \
			     "leaq (%[p], %[t], 8), %[p]\n\t"    /* &objs[n] */ \
			     "xorl %k[j], %k[j]\n\t" \
			     "6:\n\t" \
			     "movq (%[in], %[j], 8), %[x]\n\t" \
			     "movq %[x], (%[p], %[j], 8)\n\t"     /* objs[n + j] = in[j] */ \
			     "incq %[j]\n\t" \
			     "cmpq %[u], %[j]\n\t" \
			     "jb 6b\n\t" \
			     "movl $0xffff0001, %k[x]\n\t" \
			     "imulq %[u], %[x]\n\t"               /* ops + k, room - k, n + k */ \
			     "addq %[x], %[nc]\n\t" \
			     "movq %[nc], %c[nco](%[c])\n\t"      /* commit: the sequence's last instruction */ \
			     "2:\n\t" \
			     "jmp 8f\n\t" \
			     "7:\n\t"                              /* (outside the sequence) */ \
			     "xorl %k[u], %k[u]\n\t"              /* no part, or no room: k = 0 */ \
			     "8:\n\t" \
			     : [u] "=&r"(k_), [c] "=&r"(c_), [t] "=&r"(pcpu_t_), [p] "=&r"(pcpu_p_), [j] "=&r"(pcpu_j_), \
			       [x] "=&r"(pcpu_x_), [nc] "=&r"(pcpu_nc_) \
			     : [in] "r"(in_), [nr] "r"(nr_), [rs] "r"(rseq_off_), [sl] "r"(slot_), [sh] "i"(shift_), \
			       [nco] "i"(nc_off_), [obo] "i"(objs_off_) \
			     : "memory", "cc"); \
	} while (0)

/*
 * Close part c, which belongs to CPU `cpu`, from that CPU: n and room to 0
 * in one committed store (ops kept); returns the old word in *old. Goes to
 * `other` if this thread is not on `cpu` (then the caller closes it from
 * afar: pcpu.c's close_remote).
 */
#define PCPU_ARCH_CLOSE(old_, c_, cpu_, rseq_off_, nc_off_, other) \
	do { \
		uint64_t pcpu_t_; \
		__asm__ volatile goto(PCPU_SEQ_BEGIN("%[t]", "%[rs]") \
			     "cmpl %%fs:4(%[rs]), %k[cpu]\n\t" \
			     "jne %l[" #other "]\n\t" \
			     "movq %c[nco](%[c]), %[o]\n\t" \
			     "movq %[o], %[t]\n\t" \
			     "shrq $32, %[t]\n\t" \
			     "shlq $32, %[t]\n\t"                 /* ops only: n = room = 0 */ \
			     "movq %[t], %c[nco](%[c])\n\t"       /* commit */ \
			     "2:\n\t" \
			     : [o] "=&r"(old_), [t] "=&r"(pcpu_t_) \
			     : [c] "r"(c_), [cpu] "r"(cpu_), [rs] "r"(rseq_off_), [nco] "i"(nc_off_) \
			     : "memory", "cc" \
			     : other); \
	} while (0)

#endif
