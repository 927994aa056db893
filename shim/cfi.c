// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The rule of a frame at a pc, from its object's .eh_frame (for unwind.c):
 * glibc's _dl_find_object finds the object, a binary search of its
 * .eh_frame_hdr the FDE, and the CIE's and FDE's CFA programs run up to the
 * pc. A rule says where the CFA is (rsp or rbp plus an offset, or the word
 * there), where the return address and rbp were saved, or that the frame
 * is the outermost one (an undefined return address: _start, clone3), the
 * sigreturn trampoline, or code without an FDE. What it cannot express is
 * said so, not guessed. Nothing here allocates or locks.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cfi.h"

/* glibc 2.35 and later; without it every frame is a frame-pointer step. */
extern __typeof__(_dl_find_object) _dl_find_object __attribute__((weak));

/* DWARF register numbers of x86-64, and the return address column. */
#define DW_BP 6
#define DW_SP 7
#define DW_RA 16

/* Pointer encodings (DW_EH_PE_*). */
#define PE_OMIT 0xff
#define PE_ABSPTR 0x00
#define PE_ULEB128 0x01
#define PE_UDATA2 0x02
#define PE_UDATA4 0x03
#define PE_UDATA8 0x04
#define PE_SLEB128 0x09
#define PE_SDATA2 0x0a
#define PE_SDATA4 0x0b
#define PE_SDATA8 0x0c
#define PE_PCREL 0x10
#define PE_DATAREL 0x30
#define PE_INDIRECT 0x80

/* Call frame instructions (DW_CFA_*). */
enum {
	CFA_nop = 0x00,
	CFA_set_loc = 0x01,
	CFA_advance_loc1 = 0x02,
	CFA_advance_loc2 = 0x03,
	CFA_advance_loc4 = 0x04,
	CFA_offset_extended = 0x05,
	CFA_restore_extended = 0x06,
	CFA_undefined = 0x07,
	CFA_same_value = 0x08,
	CFA_register = 0x09,
	CFA_remember_state = 0x0a,
	CFA_restore_state = 0x0b,
	CFA_def_cfa = 0x0c,
	CFA_def_cfa_register = 0x0d,
	CFA_def_cfa_offset = 0x0e,
	CFA_def_cfa_expression = 0x0f,
	CFA_expression = 0x10,
	CFA_offset_extended_sf = 0x11,
	CFA_def_cfa_sf = 0x12,
	CFA_def_cfa_offset_sf = 0x13,
	CFA_val_offset = 0x14,
	CFA_val_offset_sf = 0x15,
	CFA_val_expression = 0x16,
	CFA_GNU_args_size = 0x2e,
	CFA_GNU_negative_offset_extended = 0x2f,
	CFA_advance_loc = 0x40,
	CFA_offset = 0x80,
	CFA_restore = 0xc0,
};

/* The DWARF expression operations the PLT's and a realigned frame's CFA use. */
#define OP_deref 0x06
#define OP_and 0x1a
#define OP_plus 0x22
#define OP_shl 0x24
#define OP_ge 0x2a
#define OP_lit0 0x30
#define OP_breg0 0x70

/* ---- reading .eh_frame ---- */

struct cursor {
	const uint8_t *p, *end;
	bool bad; /* read past end, or an encoding not handled */
};

static uint64_t get_u(struct cursor *c, size_t n)
{
	uint64_t v = 0;

	if ((size_t)(c->end - c->p) < n) {
		c->bad = true;
		c->p = c->end;
		return 0;
	}
	memcpy(&v, c->p, n);
	c->p += n;
	return v;
}

static int64_t get_s(struct cursor *c, size_t n)
{
	uint64_t v = get_u(c, n);
	unsigned shift = 64 - 8 * (unsigned)n;

	return (int64_t)(v << shift) >> shift;
}

/* get_leb reads a LEB128 number, sign-extended if sign is set. */
static uint64_t get_leb(struct cursor *c, bool sign)
{
	uint64_t v = 0;
	unsigned shift = 0;

	while (c->p < c->end) {
		uint8_t b = *c->p++;

		if (shift < 64)
			v |= (uint64_t)(b & 0x7f) << shift;
		shift += 7;
		if (!(b & 0x80)) {
			if (sign && shift < 64 && (b & 0x40))
				v |= ~(uint64_t)0 << shift;
			return v;
		}
	}
	c->bad = true;
	return 0;
}

static uint64_t get_uleb(struct cursor *c)
{
	return get_leb(c, false);
}

static int64_t get_sleb(struct cursor *c)
{
	return (int64_t)get_leb(c, true);
}

/*
 * get_ptr reads a pointer in encoding enc: pc-relative to where it is,
 * relative to datarel, or absolute; with follow, an indirect one is read
 * through.
 */
static uintptr_t get_ptr(struct cursor *c, uint8_t enc, uintptr_t datarel, bool follow)
{
	uintptr_t base, v;
	const uint8_t *at = c->p;

	switch (enc & 0x70) {
	case PE_ABSPTR:
		base = 0;
		break;
	case PE_PCREL:
		base = (uintptr_t)at;
		break;
	case PE_DATAREL:
		base = datarel;
		break;
	default:
		c->bad = true;
		return 0;
	}
	switch (enc & 0x0f) {
	case PE_ABSPTR:
	case PE_UDATA8:
		v = get_u(c, 8);
		break;
	case PE_ULEB128:
		v = get_uleb(c);
		break;
	case PE_UDATA2:
		v = get_u(c, 2);
		break;
	case PE_UDATA4:
		v = get_u(c, 4);
		break;
	case PE_SLEB128:
		v = (uintptr_t)get_sleb(c);
		break;
	case PE_SDATA2:
		v = (uintptr_t)get_s(c, 2);
		break;
	case PE_SDATA4:
		v = (uintptr_t)get_s(c, 4);
		break;
	case PE_SDATA8:
		v = get_u(c, 8);
		break;
	default:
		c->bad = true;
		return 0;
	}
	v += base;
	if ((enc & PE_INDIRECT) && follow && !c->bad)
		memcpy(&v, (const void *)v, sizeof(v));
	return v;
}

/*
 * find_fde returns the FDE for pc from the object's .eh_frame_hdr, by a
 * binary search of its table (the encoding every linker writes: 4-byte
 * offsets from the header), or NULL.
 */
static const uint8_t *find_fde(const uint8_t *hdr, uintptr_t pc)
{
	struct cursor c = {hdr + 4, hdr + 4 + 16, false};
	const int32_t *table;
	size_t lo = 0, hi;

	if (hdr[0] != 1 || hdr[2] == PE_OMIT || hdr[3] != (PE_DATAREL | PE_SDATA4))
		return NULL;
	get_ptr(&c, hdr[1], (uintptr_t)hdr, false);
	hi = get_ptr(&c, hdr[2], (uintptr_t)hdr, false);
	if (c.bad || hi == 0)
		return NULL;
	table = (const int32_t *)c.p;
	if (pc < (uintptr_t)hdr + table[0])
		return NULL;
	/* The last entry whose start is at or below pc. */
	while (hi - lo > 1) {
		size_t mid = lo + (hi - lo) / 2;

		if ((uintptr_t)hdr + table[2 * mid] <= pc)
			lo = mid;
		else
			hi = mid;
	}
	return hdr + table[2 * lo + 1];
}

/* What a CIE says that its FDEs' rows need. */
struct cie {
	struct cursor insns; /* the initial instructions */
	uint64_t code_align;
	int64_t data_align;
	uint64_t ra_reg;
	uint8_t fde_enc;
	bool has_aug_data;
};

/* entry_cursor returns the contents of a CIE or FDE at p, after its length. */
static struct cursor entry_cursor(const uint8_t *p)
{
	uint32_t len;

	memcpy(&len, p, 4);
	/* 0: the table's end; all ones: a 64-bit length, which no x86-64 linker writes. */
	if (len == 0 || len == 0xffffffff)
		return (struct cursor){p, p, true};
	return (struct cursor){p + 4, p + 4 + len, false};
}

static bool parse_cie(const uint8_t *p, struct cie *cie)
{
	struct cursor c = entry_cursor(p);
	const char *aug;
	uint8_t version;

	if (c.bad || get_u(&c, 4) != 0)
		return false;
	version = (uint8_t)get_u(&c, 1);
	if (version != 1 && version != 3)
		return false;
	aug = (const char *)c.p;
	c.p += strnlen(aug, (size_t)(c.end - c.p)) + 1;
	cie->code_align = get_uleb(&c);
	cie->data_align = get_sleb(&c);
	cie->ra_reg = version == 1 ? get_u(&c, 1) : get_uleb(&c);
	cie->fde_enc = PE_ABSPTR;
	cie->has_aug_data = aug[0] == 'z';
	if (cie->has_aug_data) {
		uint64_t len = get_uleb(&c);
		const uint8_t *data_end = c.p + len;

		for (const char *a = aug + 1; *a != '\0' && !c.bad; a++) {
			switch (*a) {
			case 'L': /* the LSDA's encoding */
				get_u(&c, 1);
				break;
			case 'R': /* the FDEs' pointers' encoding */
				cie->fde_enc = (uint8_t)get_u(&c, 1);
				break;
			case 'P': { /* the personality routine */
				uint8_t enc = (uint8_t)get_u(&c, 1);

				get_ptr(&c, enc, 0, false);
				break;
			}
			case 'S': /* a signal frame: found by its code instead */
				break;
			default:
				return false;
			}
		}
		if (c.bad || data_end > c.end)
			return false;
		c.p = data_end;
	} else if (aug[0] != '\0') {
		return false;
	}
	cie->insns = c;
	return !c.bad;
}

/* ---- running the CFA program ---- */

/* How a register is recovered in the caller. */
enum how {
	SAME,       /* unchanged */
	UNDEF,      /* lost (for the return address: the outermost frame) */
	AT_CFA,     /* saved at CFA + off */
	UNEXPRESSED /* another register, an expression, a value: not expressed here */
};

struct reg_rule {
	enum how how;
	int64_t off;
};

/* A row of the table: the CFA and the registers the walk needs. */
struct row {
	uint64_t cfa_reg;
	int64_t cfa_off;
	const uint8_t *cfa_expr; /* DW_CFA_def_cfa_expression's block (length first), or NULL */
	struct reg_rule bp, ra;
	bool sp_rule; /* a rule for rsp itself, which the walk takes to be the CFA */
};

#define STATE_DEPTH 8

struct machine {
	const struct cie *cie;
	uintptr_t pc;
	struct row row, init;
	struct row saved[STATE_DEPTH];
	unsigned depth;
};

static void set_rule(struct machine *m, uint64_t reg, enum how how, int64_t off)
{
	if (reg == DW_BP) {
		m->row.bp = (struct reg_rule){how, off};
	} else if (reg == m->cie->ra_reg) {
		m->row.ra = (struct reg_rule){how, off};
	} else if (reg == DW_SP) {
		m->row.sp_rule = how != SAME;
	}
}

static void restore_rule(struct machine *m, uint64_t reg)
{
	if (reg == DW_BP)
		m->row.bp = m->init.bp;
	else if (reg == m->cie->ra_reg)
		m->row.ra = m->init.ra;
	else if (reg == DW_SP)
		m->row.sp_rule = m->init.sp_rule;
}

/* skip_block steps over a DWARF expression (its length first) and returns its start. */
static const uint8_t *skip_block(struct cursor *c)
{
	const uint8_t *start = c->p;
	uint64_t len = get_uleb(c);

	if (len > (uint64_t)(c->end - c->p))
		c->bad = true;
	else
		c->p += len;
	return start;
}

/*
 * run executes instructions from loc until the row that covers the pc;
 * false for an instruction that cannot be followed. Only rbp, rsp and the
 * return address column are kept: the other registers do not matter to a
 * walk that reads no more than the CFA, the return address and rbp.
 */
static bool run(struct machine *m, struct cursor c, uintptr_t loc)
{
	const struct cie *cie = m->cie;

	while (c.p < c.end && !c.bad) {
		uint8_t op = *c.p++;
		uint64_t reg, delta = 0;

		switch (op & 0xc0) {
		case CFA_advance_loc:
			delta = op & 0x3f;
			goto advance;
		case CFA_offset:
			set_rule(m, op & 0x3f, AT_CFA, (int64_t)get_uleb(&c) * cie->data_align);
			continue;
		case CFA_restore:
			restore_rule(m, op & 0x3f);
			continue;
		}
		switch (op) {
		case CFA_nop:
		case CFA_GNU_args_size:
			if (op == CFA_GNU_args_size)
				get_uleb(&c);
			break;
		case CFA_set_loc:
			loc = get_ptr(&c, cie->fde_enc, 0, false);
			if (loc > m->pc)
				return !c.bad;
			break;
		case CFA_advance_loc1:
			delta = get_u(&c, 1);
			goto advance;
		case CFA_advance_loc2:
			delta = get_u(&c, 2);
			goto advance;
		case CFA_advance_loc4:
			delta = get_u(&c, 4);
			goto advance;
		case CFA_offset_extended:
			reg = get_uleb(&c);
			set_rule(m, reg, AT_CFA, (int64_t)get_uleb(&c) * cie->data_align);
			break;
		case CFA_offset_extended_sf:
			reg = get_uleb(&c);
			set_rule(m, reg, AT_CFA, get_sleb(&c) * cie->data_align);
			break;
		case CFA_GNU_negative_offset_extended:
			reg = get_uleb(&c);
			set_rule(m, reg, AT_CFA, -(int64_t)get_uleb(&c) * cie->data_align);
			break;
		case CFA_restore_extended:
			restore_rule(m, get_uleb(&c));
			break;
		case CFA_undefined:
			set_rule(m, get_uleb(&c), UNDEF, 0);
			break;
		case CFA_same_value:
			set_rule(m, get_uleb(&c), SAME, 0);
			break;
		case CFA_register:
			reg = get_uleb(&c);
			set_rule(m, reg, get_uleb(&c) == reg ? SAME : UNEXPRESSED, 0);
			break;
		case CFA_val_offset:
		case CFA_val_offset_sf:
			reg = get_uleb(&c);
			if (op == CFA_val_offset)
				get_uleb(&c);
			else
				get_sleb(&c);
			set_rule(m, reg, UNEXPRESSED, 0);
			break;
		case CFA_expression:
		case CFA_val_expression:
			reg = get_uleb(&c);
			skip_block(&c);
			set_rule(m, reg, UNEXPRESSED, 0);
			break;
		case CFA_remember_state:
			if (m->depth == STATE_DEPTH)
				return false;
			m->saved[m->depth++] = m->row;
			break;
		case CFA_restore_state:
			if (m->depth == 0)
				return false;
			/* The CFA's rule comes back too: an epilogue's remember_state, def_cfa_offset 8, ret. */
			m->row = m->saved[--m->depth];
			break;
		case CFA_def_cfa:
			m->row.cfa_reg = get_uleb(&c);
			m->row.cfa_off = (int64_t)get_uleb(&c);
			m->row.cfa_expr = NULL;
			break;
		case CFA_def_cfa_sf:
			m->row.cfa_reg = get_uleb(&c);
			m->row.cfa_off = get_sleb(&c) * cie->data_align;
			m->row.cfa_expr = NULL;
			break;
		case CFA_def_cfa_register:
			m->row.cfa_reg = get_uleb(&c);
			m->row.cfa_expr = NULL;
			break;
		case CFA_def_cfa_offset:
			m->row.cfa_off = (int64_t)get_uleb(&c);
			break;
		case CFA_def_cfa_offset_sf:
			m->row.cfa_off = get_sleb(&c) * cie->data_align;
			break;
		case CFA_def_cfa_expression:
			m->row.cfa_expr = skip_block(&c);
			break;
		default:
			return false;
		}
		continue;
advance:
		loc += delta * cie->code_align;
		if (loc > m->pc)
			return !c.bad;
	}
	return !c.bad;
}

/* ---- rules ---- */

static union md_rule kind_rule(enum md_rule_kind k)
{
	union md_rule r = {0};

	r.kind = k;
	return r;
}

/*
 * plt_cfa matches the CFA expression linkers give a PLT, rsp + N + 8 once
 * the stub has pushed its index, (((rip & 15) >= K) << 3), and evaluates it
 * at pc.
 */
static bool plt_cfa(const uint8_t *expr, uintptr_t pc, int64_t *off)
{
	struct cursor c = {expr, expr + 16, false};
	uint64_t len = get_uleb(&c);
	const uint8_t *end = c.p + len;
	int64_t n;
	uint8_t k;

	if (len < 10 || get_u(&c, 1) != OP_breg0 + DW_SP)
		return false;
	n = get_sleb(&c);
	if (get_u(&c, 1) != OP_breg0 + DW_RA || get_sleb(&c) != 0 || get_u(&c, 1) != OP_lit0 + 15 ||
	    get_u(&c, 1) != OP_and)
		return false;
	k = (uint8_t)(get_u(&c, 1) - OP_lit0);
	if (k > 15 || get_u(&c, 1) != OP_ge || get_u(&c, 1) != OP_lit0 + 3 || get_u(&c, 1) != OP_shl ||
	    get_u(&c, 1) != OP_plus || c.p != end || c.bad)
		return false;
	*off = n + ((pc & 15) >= k ? 8 : 0);
	return true;
}

/* deref_cfa matches "breg(rsp or rbp) N; deref", a realigned frame's CFA. */
static bool deref_cfa(const uint8_t *expr, uint64_t *reg, int64_t *off)
{
	struct cursor c = {expr, expr + 16, false};
	uint64_t len = get_uleb(&c);
	const uint8_t *end = c.p + len;
	uint8_t op = (uint8_t)get_u(&c, 1);

	if (op != OP_breg0 + DW_SP && op != OP_breg0 + DW_BP)
		return false;
	*reg = op - OP_breg0;
	*off = get_sleb(&c);
	return get_u(&c, 1) == OP_deref && c.p == end && !c.bad;
}

/* to_rule packs the row at pc into a rule, or says it cannot be. */
static union md_rule to_rule(const struct row *row, uintptr_t pc)
{
	union md_rule r = {0};
	uint64_t reg = row->cfa_reg;
	int64_t off = row->cfa_off;

	if (row->ra.how == UNDEF)
		return kind_rule(MD_RULE_END);
	if (row->sp_rule || row->ra.how != AT_CFA || row->ra.off < INT8_MIN || row->ra.off > INT8_MAX)
		return kind_rule(MD_RULE_UNSUPPORTED);
	if (row->cfa_expr != NULL) {
		if (plt_cfa(row->cfa_expr, pc, &off))
			reg = DW_SP;
		else if (deref_cfa(row->cfa_expr, &reg, &off))
			r.deref = 1;
		else
			return kind_rule(MD_RULE_UNSUPPORTED);
	}
	if ((reg != DW_SP && reg != DW_BP) || off < INT32_MIN || off > INT32_MAX)
		return kind_rule(MD_RULE_UNSUPPORTED);
	r.kind = MD_RULE_CFA;
	r.cfa_bp = reg == DW_BP;
	r.cfa_off = (int32_t)off;
	r.ra_off = (int8_t)row->ra.off;
	if (row->bp.how == AT_CFA && row->bp.off >= INT16_MIN && row->bp.off <= INT16_MAX) {
		r.bp_saved = 1;
		r.bp_off = (int16_t)row->bp.off;
	} else if (row->bp.how != SAME) {
		r.bp_lost = 1;
	}
	return r;
}

/* fde_rule finds the FDE for pc in the object whose .eh_frame_hdr is hdr and gives its rule at pc. */
static union md_rule fde_rule(const uint8_t *hdr, uintptr_t pc)
{
	const uint8_t *fde = hdr != NULL ? find_fde(hdr, pc) : NULL;
	struct machine m;
	struct cursor c;
	struct cie cie;
	uintptr_t start, range;
	int32_t cie_off;

	if (fde == NULL)
		return kind_rule(MD_RULE_NO_FDE);
	c = entry_cursor(fde);
	cie_off = (int32_t)get_u(&c, 4);
	if (c.bad || cie_off == 0 || !parse_cie(fde + 4 - cie_off, &cie))
		return kind_rule(MD_RULE_UNSUPPORTED);
	start = get_ptr(&c, cie.fde_enc, 0, true);
	range = get_ptr(&c, cie.fde_enc & 0x0f, 0, false);
	if (c.bad || pc < start || pc - start >= range)
		return kind_rule(MD_RULE_NO_FDE);
	if (cie.has_aug_data) {
		uint64_t len = get_uleb(&c);

		if (len > (uint64_t)(c.end - c.p))
			return kind_rule(MD_RULE_UNSUPPORTED);
		c.p += len;
	}
	memset(&m, 0, sizeof(m));
	m.cie = &cie;
	m.pc = pc;
	m.row.cfa_reg = DW_SP;
	if (!run(&m, cie.insns, start))
		return kind_rule(MD_RULE_UNSUPPORTED);
	m.init = m.row;
	m.depth = 0;
	if (!run(&m, c, start))
		return kind_rule(MD_RULE_UNSUPPORTED);
	return to_rule(&m.row, pc);
}

/* rt_sigreturn's trampoline, glibc's __restore_rt: mov $15, %rax; syscall. */
static const uint8_t sigreturn_code[] = {0x48, 0xc7, 0xc0, 0x0f, 0x00, 0x00, 0x00, 0x0f, 0x05};

union md_rule md_cfi_rule(uintptr_t pc)
{
	struct dl_find_object obj;

	if (_dl_find_object == NULL)
		return kind_rule(MD_RULE_NO_FDE);
	if (_dl_find_object((void *)pc, &obj) != 0)
		return kind_rule(MD_RULE_BAD_RA);
	/* The code is read in pc's page only, which is mapped: glibc's trampoline is 16-byte aligned. */
	if (((pc + sizeof(sigreturn_code)) & ~(uintptr_t)4095) == (pc & ~(uintptr_t)4095) &&
	    memcmp((const void *)(pc + 1), sigreturn_code, sizeof(sigreturn_code)) == 0)
		return kind_rule(MD_RULE_SIGNAL);
	return fde_rule(obj.dlfo_eh_frame, pc);
}

