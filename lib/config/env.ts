import { readFileSync } from 'node:fs'
import { Value } from '@sinclair/typebox/value'
import ipaddr from 'ipaddr.js'
import { EnvSchema, secretEnvVariables, type Env } from '../../schemas/env.js'
import { parseDuration, type DurationUnit } from '../duration.js'
import { parseRateLimit, type RateLimit } from '../limits/rate-limit.js'
import { ConfigError } from './error.js'

/**
 * The environment against its schema, and the readers every concern's module uses on the
 * values the schema let through (durations within their bounds, rate limits, CIDR lists).
 */

/** Reads a secret's file (`<NAME>_FILE`) once at start; the path is named, never the content. */
function readSecretFile (variable: string, path: string): string {
  let text: string
  try {
    text = readFileSync(path, 'utf8')
  } catch (error) {
    throw new ConfigError(`${variable}_FILE`, `cannot be read: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message} (${path})`)
  }
  const value = text.trim()
  if (value === '') throw new ConfigError(`${variable}_FILE`, `names an empty file (${path})`)
  return value
}

/**
 * The environment with every secret given as a file (`<NAME>_FILE`) read into its variable.
 * Both set is an error: which one wins would depend on who reads the manifest.
 */
function withSecretFiles (source: Readonly<Record<string, string | undefined>>): Readonly<Record<string, string | undefined>> {
  const set = (value: string | undefined): value is string => value !== undefined && value.trim() !== ''
  let resolved: Record<string, string | undefined> | null = null
  for (const variable of secretEnvVariables) {
    const path = source[`${variable}_FILE`]
    if (!set(path)) continue
    if (set(source[variable])) throw new ConfigError(`${variable}_FILE`, `cannot be combined with ${variable}: set one of them`)
    resolved ??= { ...source }
    resolved[variable] = readSecretFile(variable, path.trim())
  }
  return resolved ?? source
}

const DECIMAL_INTEGER = /^-?[0-9]{1,15}$/

/** The environment against its schema, defaults applied; throws ConfigError naming the first bad variable. */
export function validEnv (environment: Readonly<Record<string, string | undefined>>): Env {
  const source = withSecretFiles(environment)
  const raw: Record<string, unknown> = {}
  for (const name of Object.keys(EnvSchema.properties)) {
    const value = source[name]
    // An empty variable (common in container manifests) means "not set".
    if (value !== undefined && value.trim() !== '') raw[name] = value.trim()
  }
  for (const [name, value] of Object.entries(raw)) {
    // TypeBox's conversion reads "1.5", "1e1" and "0x1" as 1: a number is written in digits.
    const schema = EnvSchema.properties[name as keyof typeof EnvSchema.properties] as { type?: unknown }
    if (schema.type === 'integer' && !DECIMAL_INTEGER.test(value as string)) {
      throw new ConfigError(name, `${describe(schema as VariableSchema)} (got ${JSON.stringify(value)})`)
    }
  }
  const env = Value.Convert(EnvSchema, Value.Default(EnvSchema, raw))
  const firstError = Value.Errors(EnvSchema, env).First()
  if (firstError !== undefined) {
    const variable = firstError.path.replace(/^\//, '') || 'environment'
    const shown = secretEnvVariables.has(variable) ? '' : ` (got ${JSON.stringify(raw[variable])})`
    throw new ConfigError(variable, `${describe(firstError.schema as VariableSchema)}${shown}`)
  }
  return env as Env
}

interface DurationSchema { durationUnit: DurationUnit | null, durationMinimum: string, durationMaximum: string }

/** The part of a variable's schema its error line is written from. */
interface VariableSchema { type?: unknown, minimum?: number, maximum?: number, minLength?: number, pattern?: string, patternRule?: string, anyOf?: Array<{ const?: unknown }> }

const isDurationSchema = (schema: object): schema is DurationSchema => 'durationMinimum' in schema

function durationRule (schema: DurationSchema): string {
  const plain = schema.durationUnit === null ? '' : ` (a plain number is ${schema.durationUnit === 'ms' ? 'milliseconds' : 'seconds'})`
  return `must be a duration from ${schema.durationMinimum} to ${schema.durationMaximum}, such as 500ms, 30s, 15m, 24h or 30d${plain}`
}

/** What a variable's schema asks for, in words: a named pattern says it itself (schemas/patterns.ts). */
function describe (schema: VariableSchema): string {
  if (isDurationSchema(schema)) return durationRule(schema)
  if (Array.isArray(schema.anyOf)) return `must be one of ${schema.anyOf.map((option) => String(option.const)).join(', ')}`
  if (schema.type === 'integer') return `must be an integer from ${schema.minimum} to ${schema.maximum}`
  if (schema.pattern !== undefined) return schema.patternRule ?? `must match ${schema.pattern}`
  if (schema.minLength !== undefined) return `must be at least ${schema.minLength} characters long`
  return 'is not valid'
}

export type DurationVariable = { [Name in keyof Env]-?: Env[Name] extends string ? Name : never }[keyof Env]

/** A duration variable in milliseconds, within the bounds its schema names. */
export function durationMs (env: Env, variable: DurationVariable): number {
  const schema = EnvSchema.properties[variable] as unknown as DurationSchema
  const spec = env[variable]
  const ms = parseDuration(spec, schema.durationUnit)
  const minimum = parseDuration(schema.durationMinimum, null) ?? 0
  const maximum = parseDuration(schema.durationMaximum, null) ?? 0
  if (ms === null || ms < minimum || ms > maximum) throw new ConfigError(variable, `${durationRule(schema)} (got ${JSON.stringify(spec)})`)
  return ms
}

/** A duration variable's default, in milliseconds. */
export function defaultDurationMs (variable: DurationVariable): number {
  const schema = EnvSchema.properties[variable] as unknown as DurationSchema & { default: string }
  return parseDuration(schema.default, schema.durationUnit) ?? 0
}

/** A duration variable the service counts in whole seconds. */
export function durationSeconds (env: Env, variable: DurationVariable): number {
  const ms = durationMs(env, variable)
  if (ms % 1000 !== 0) throw new ConfigError(variable, `must be whole seconds (got ${JSON.stringify(env[variable])})`)
  return ms / 1000
}

export function rateLimit (variable: string, spec: string): RateLimit {
  const parsed = parseRateLimit(spec)
  if (parsed === null) throw new ConfigError(variable, `must be max/window such as 5/15m (got ${JSON.stringify(spec)})`)
  return parsed
}

export function parseCidrList (variable: string, value: string | undefined): string[] {
  if (value === undefined) return []
  const entries = value.split(',').map((entry) => entry.trim()).filter((entry) => entry !== '')
  for (const entry of entries) {
    if (!ipaddr.isValid(entry) && !isCidr(entry)) throw new ConfigError(variable, `has an entry that is not an address or CIDR: ${JSON.stringify(entry)}`)
  }
  return entries
}

function isCidr (entry: string): boolean {
  try {
    ipaddr.parseCIDR(entry)
    return true
  } catch {
    return false
  }
}
