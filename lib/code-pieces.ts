import { createHash } from 'node:crypto'

/*
 * A part a tenant's template rendered is kept as the pieces of text around the code: the
 * template renders once a minute with a mark where the code goes, and each dispatch of that
 * minute only puts its code in (lib/mail/templating/liquid.ts). The sandbox inbox keeps the
 * pieces rather than each message's whole part: in process one set shared by every message of
 * the minute, on Redis one value for all of them (sandboxPiecesKey). This module is the only
 * one that knows what the pieces are; templates, the mailer and the stores pass them around
 * as a CodePieces and ask it for the part, or for the form a store keeps.
 */

const LATIN_1 = /^[\u0000-\u00ff]*$/

/**
 * A piece of the output as a string of its own. The pieces `split` leaves are slices of the
 * whole output, which the code mark's private-use characters made two bytes a character: a
 * Latin-1 piece copied is one byte a character, half the memory, and every transport encodes
 * it several times faster (UTF-8 for the log, SES or SMTP: 50 µs against 390 µs for a 64 KiB
 * part). Done once per render, not per dispatch.
 */
function oneBytePerCharacter (piece: string): string {
  return LATIN_1.test(piece) ? Buffer.from(piece, 'latin1').toString('latin1') : piece
}

/**
 * The pieces as a store keeps them once: the JSON list of their lengths, a newline, the pieces
 * one after the other. `id` is the SHA-256 of that value, so that every instance rendering the
 * same minute's pieces names them alike and writes them once.
 */
export interface StoredPieces {
  id: string
  value: string
}

/** A rendered part as the text around its code, the code left out. */
export class CodePieces {
  readonly #pieces: readonly string[]
  #stored: StoredPieces | undefined

  private constructor (pieces: readonly string[]) {
    this.#pieces = pieces
  }

  /** A render's output cut where `mark` stands for the code. */
  static split (output: string, mark: string): CodePieces {
    return new CodePieces(output.split(mark).map(oneBytePerCharacter))
  }

  /** The pieces a stored value (`stored.value`) holds, or null for a value this service did not write. */
  static fromStored (value: string): CodePieces | null {
    const end = value.indexOf('\n')
    if (end < 0) return null
    let lengths: unknown
    try {
      lengths = JSON.parse(value.slice(0, end))
    } catch {
      return null
    }
    if (!Array.isArray(lengths) || lengths.length === 0) return null
    const pieces: string[] = []
    let at = end + 1
    for (const length of lengths) {
      if (!Number.isSafeInteger(length) || (length as number) < 0) return null
      pieces.push(value.slice(at, at + (length as number)))
      at += length as number
    }
    return at === value.length ? new CodePieces(pieces) : null
  }

  /** How many times the code stands in the part. */
  get codes (): number {
    return this.#pieces.length - 1
  }

  /**
   * The part with `code` in its place, without copying the pieces: V8 keeps the concatenation
   * of long strings as references to them until something reads it flat, so a dispatch
   * allocates a few dozen bytes instead of its part again. (A tenant's 320 KiB parts, joined
   * afresh on every dispatch, made the garbage collections every other tenant waits for:
   * bench/noisy-neighbour.md.)
   */
  splice (code: string): string {
    const [before, after] = this.#pieces
    return this.#pieces.length === 2 && before !== undefined && after !== undefined ? before + code + after : this.#pieces.join(code)
  }

  /** The form a store keeps once for every message of the minute; computed once, as the same pieces serve the whole minute. */
  get stored (): StoredPieces {
    if (this.#stored === undefined) {
      const value = `${JSON.stringify(this.#pieces.map((piece) => piece.length))}\n${this.#pieces.join('')}`
      this.#stored = { id: createHash('sha256').update(value).digest('base64url'), value }
    }
    return this.#stored
  }
}

/**
 * A message's text and HTML as pieces, where a tenant's template rendered them; null for a
 * part in the built-in wording, which is rendered whole for each message.
 */
export interface BodyPieces {
  text: CodePieces | null
  html: CodePieces | null
}
