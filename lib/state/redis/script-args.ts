/*
 * A script's KEYS and ARGV, named once: their names, order and types. From that one definition
 * come both sides of the wire: `packArgs` builds the KEYS and ARGV arrays from named values, and
 * `luaPrologue` declares a Lua local per name (a list's first position and its length), so that
 * a script reads `limitsAt` and `ownLimits` rather than `3 + quotas + mailboxes`, and adding an
 * argument is one edit here, not one in the script and one more in the code that packs it.
 *
 * The arrays are what the scripts have always taken (test/lib/state/redis/key-names.test.ts):
 * fixed fields first, lists in place, each list's length either sent as a count field earlier
 * in ARGV, shared with another list, or (one KEYS list at most) whatever lies between the
 * fixed keys before and after it; the last ARGV field may be a list that takes the rest of ARGV
 * (an uncounted `texts`, or `tuples` without `per`). A fenced script's deadline is not among
 * them: it is always the last ARGV (fence.ts), so a fenced script's ARGV has no such rest.
 */

/** One key. */
interface KeyField<N extends string> { readonly kind: 'key', readonly name: N }
/** Keys whose number is given by `count(name)` in ARGV, or, without one, all between the fixed keys before and after. */
interface KeyList<N extends string> { readonly kind: 'keys', readonly name: N }
/** One argument, as it is (text), read with tonumber (number), or '1'/'0' read as a boolean (flag). */
interface ArgField<N extends string, K extends 'text' | 'number' | 'flag'> { readonly kind: K, readonly name: N }
/** The length of list `of`, sent for the script to read as `<of>Count`; packed from the list itself. */
interface CountField<L extends string> { readonly kind: 'count', readonly of: L }
/** Arguments of a text list counted by `count(name)`, or, uncounted and last, the rest of ARGV. */
interface TextList<N extends string> { readonly kind: 'texts', readonly name: N }
/**
 * One tuple of arguments per entry of list `per` (`fields` in order); read as `<name>At`, `width`
 * apart. Without `per` (null), last: the tuples that fill the rest of ARGV, `<name>Count` of them.
 */
interface TupleList<N extends string, F extends string> { readonly kind: 'tuples', readonly name: N, readonly fields: readonly F[], readonly per: string | null }

type AnyKey = KeyField<string> | KeyList<string>
type AnyArg = ArgField<string, 'text' | 'number' | 'flag'> | CountField<string> | TextList<string> | TupleList<string, string>

export const key = <N extends string>(name: N): KeyField<N> => ({ kind: 'key', name })
export const keys = <N extends string>(name: N): KeyList<N> => ({ kind: 'keys', name })
export const text = <N extends string>(name: N): ArgField<N, 'text'> => ({ kind: 'text', name })
export const number = <N extends string>(name: N): ArgField<N, 'number'> => ({ kind: 'number', name })
export const flag = <N extends string>(name: N): ArgField<N, 'flag'> => ({ kind: 'flag', name })
export const count = <L extends string>(of: L): CountField<L> => ({ kind: 'count', of })
export const texts = <N extends string>(name: N): TextList<N> => ({ kind: 'texts', name })
export const tuples = <N extends string, const F extends readonly string[]>(name: N, fields: F, per: string | null = null): TupleList<N, F[number]> => ({ kind: 'tuples', name, fields, per })

export interface ScriptArgs<K extends readonly AnyKey[], A extends readonly AnyArg[]> {
  readonly keys: K
  readonly argv: A
}

/** A script's arguments: KEYS then ARGV, each in the order the script takes them. */
export function scriptArgs<const K extends readonly AnyKey[], const A extends readonly AnyArg[]> (definition: ScriptArgs<K, A>): ScriptArgs<K, A> {
  const counted = new Set(definition.argv.flatMap((field) => field.kind === 'count' ? [field.of] : []))
  const lists = new Set([...definition.keys, ...definition.argv].flatMap((field) => field.kind === 'keys' || field.kind === 'texts' ? [field.name] : []))
  const rest = definition.keys.filter((field) => field.kind === 'keys' && !counted.has(field.name))
  if (rest.length > 1) throw new Error('at most one KEYS list may go uncounted')
  for (const [index, field] of definition.argv.entries()) {
    const last = index === definition.argv.length - 1
    if (field.kind === 'texts' && !counted.has(field.name) && !last) throw new Error(`the ARGV list ${field.name} needs a count, or to be last`)
    if (field.kind === 'tuples' && field.per === null && !last) throw new Error(`${field.name} is per no list, so it must be last`)
    if (field.kind === 'tuples' && field.per !== null && !lists.has(field.per)) throw new Error(`${field.name} is per ${field.per}, which is no list`)
  }
  return definition
}

type ValueOf<F> =
  F extends KeyField<infer N> | ArgField<infer N, 'text'> ? { [name in N]: string }
    : F extends ArgField<infer N, 'number'> ? { [name in N]: number }
      : F extends ArgField<infer N, 'flag'> ? { [name in N]: boolean }
        : F extends KeyList<infer N> | TextList<infer N> ? { [name in N]: readonly string[] }
          : F extends TupleList<infer N, infer T> ? { [name in N]: ReadonlyArray<{ readonly [field in T]: string | number }> }
            : Record<never, never>

type Intersection<U> = (U extends unknown ? (value: U) => void : never) extends (value: infer I) => void ? I : never

/** The named values a script's call packs: a string per key and text, a number, a boolean per flag, an array per list. */
export type ArgValues<S> = S extends ScriptArgs<infer K, infer A> ? Intersection<ValueOf<K[number] | A[number]>> : never

/** A call's KEYS and ARGV. */
export interface PackedArgs {
  keys: string[]
  args: string[]
}

/** KEYS and ARGV of a call, in the script's order; numbers go as strings (ioredis encodes a number argument slower). */
export function packArgs<K extends readonly AnyKey[], A extends readonly AnyArg[]> (definition: ScriptArgs<K, A>, values: ArgValues<ScriptArgs<K, A>>): PackedArgs {
  const named = values as Record<string, unknown>
  const list = (name: string): readonly unknown[] => named[name] as readonly unknown[]
  const packedKeys: string[] = []
  for (const field of definition.keys) {
    if (field.kind === 'key') packedKeys.push(named[field.name] as string)
    else packedKeys.push(...list(field.name) as string[])
  }
  const args: string[] = []
  for (const field of definition.argv) {
    switch (field.kind) {
      case 'text': args.push(named[field.name] as string); break
      case 'number': args.push(String(named[field.name])); break
      case 'flag': args.push(named[field.name] === true ? '1' : '0'); break
      case 'count': args.push(String(list(field.of).length)); break
      case 'texts': args.push(...list(field.name) as string[]); break
      case 'tuples': {
        const entries = list(field.name) as ReadonlyArray<Record<string, string | number>>
        if (field.per !== null && entries.length !== list(field.per).length) throw new RangeError(`${field.name}: ${entries.length} entries for ${list(field.per).length} ${field.per}`)
        for (const entry of entries) for (const name of field.fields) args.push(String(entry[name]))
        break
      }
    }
  }
  return { keys: packedKeys, args }
}

/**
 * The Lua locals of a script's arguments, to start its body with: `local <name>` for a key or an
 * argument (numbers through tonumber, flags as booleans), `<name>At` and `<name>Count` for a
 * list (a list of tuples: `<name>At`, its entry i's fields from `<name>At + width * (i - 1)`).
 */
export function luaPrologue (definition: ScriptArgs<readonly AnyKey[], readonly AnyArg[]>): string {
  const lines: string[] = []
  const counted = new Set(definition.argv.flatMap((field) => field.kind === 'count' ? [field.of] : []))
  const countOf = (name: string): string => `${name}Count`
  // ARGV up to its first list is at fixed positions: the counts the KEYS lists need are there.
  const fixedArgv = definition.argv.findIndex((field) => field.kind === 'texts' || field.kind === 'tuples')
  const fixed = fixedArgv === -1 ? definition.argv : definition.argv.slice(0, fixedArgv)
  const argLine = (field: AnyArg, at: string): void => {
    switch (field.kind) {
      case 'text': lines.push(`local ${field.name} = ARGV[${at}]`); break
      case 'number': lines.push(`local ${field.name} = tonumber(ARGV[${at}])`); break
      case 'flag': lines.push(`local ${field.name} = ARGV[${at}] == '1'`); break
      case 'count': lines.push(`local ${countOf(field.of)} = tonumber(ARGV[${at}])`); break
      default: throw new Error('a list has no fixed position')
    }
  }
  fixed.forEach((field, index) => { argLine(field, String(index + 1)) })

  // A position: a list's end (a Lua expression) or none yet, plus the fixed fields after it.
  let at: { after: string | null, plus: number } = { after: null, plus: 1 }
  const position = (): string => at.after === null ? String(at.plus) : at.plus === 0 ? at.after : `${at.after} + ${at.plus}`
  const keyFields = definition.keys
  for (const [index, field] of keyFields.entries()) {
    if (field.kind === 'key') {
      lines.push(`local ${field.name} = KEYS[${position()}]`)
      at = { ...at, plus: at.plus + 1 }
      continue
    }
    lines.push(`local ${field.name}At = ${position()}`)
    if (counted.has(field.name)) {
      at = { after: `${field.name}At + ${countOf(field.name)}`, plus: 0 }
      continue
    }
    // The one uncounted list: the keys between the fixed ones before and after it, which are
    // read from the end.
    const after = keyFields.slice(index + 1)
    lines.push(`local ${countOf(field.name)} = #KEYS - ${field.name}At + 1${after.length === 0 ? '' : ` - ${after.length}`}`)
    for (const [offset, next] of after.entries()) {
      if (next.kind !== 'key') throw new Error('no list after the uncounted one')
      const fromEnd = after.length - offset - 1
      lines.push(`local ${next.name} = KEYS[#KEYS${fromEnd === 0 ? '' : ` - ${fromEnd}`}]`)
    }
    break
  }

  at = { after: null, plus: fixed.length + 1 }
  for (const field of definition.argv.slice(fixed.length)) {
    if (field.kind === 'texts') {
      lines.push(`local ${field.name}At = ${position()}`)
      if (!counted.has(field.name)) lines.push(`local ${countOf(field.name)} = #ARGV - ${field.name}At + 1`)
      at = { after: `${field.name}At + ${countOf(field.name)}`, plus: 0 }
    } else if (field.kind === 'tuples') {
      lines.push(`local ${field.name}At = ${position()}`)
      if (field.per === null) lines.push(`local ${countOf(field.name)} = (#ARGV - ${field.name}At + 1) / ${field.fields.length}`)
      at = { after: `${field.name}At + ${field.fields.length} * ${countOf(field.per ?? field.name)}`, plus: 0 }
    } else {
      argLine(field, position())
      at = { ...at, plus: at.plus + 1 }
    }
  }
  return `${lines.join('\n')}\n`
}
