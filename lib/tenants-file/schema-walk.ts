import { Kind, type TArray, type TObject, type TSchema } from '@sinclair/typebox'
import { GetErrorFunction, ValueErrorType } from '@sinclair/typebox/errors'
import { TypeSystemPolicy } from '@sinclair/typebox/system'
import { Value } from '@sinclair/typebox/value'
import type { BuiltLists } from './lists.js'
import type { LoadTurns } from './turns.js'

/** A place where a value breaks its schema, as Value.Errors words it. */
export interface SchemaProblem {
  path: string
  message: string
}

/** What a walk of the schema needs: the turns it counts in, and the lists already checked. */
export interface WalkContext {
  turns: LoadTurns
  lists: BuiltLists
}

const problemOf = (errorType: ValueErrorType, schema: TSchema, path: string, value: unknown): SchemaProblem =>
  ({ path, message: GetErrorFunction()({ errorType, path, schema, value, errors: [] }) })

/** RFC 6901, as TypeBox escapes a property name in a path. */
const escapeKey = (key: string): string => key.replace(/~/g, '~0').replace(/\//g, '~1')

const isContainer = (schema: TSchema): boolean => schema[Kind] === 'Object' || schema[Kind] === 'Array'

/**
 * Every place where `value` breaks `schema`, in Value.Errors' words and order, told to `found`
 * one at a time (it answers false to stop the walk; the walk then returns false). Objects and
 * arrays are walked here, a unit of work per entry, so that a list of 100,000 entries is checked
 * over many turns; an array of plain values is checked once per content (`lists`); anything
 * else goes to Value.Errors whole, which a schema keeps small.
 */
export function * schemaErrors (schema: TSchema, value: unknown, path: string, context: WalkContext, found: (problem: SchemaProblem) => boolean): Generator<void, boolean, void> {
  if (schema[Kind] === 'Object' && TypeSystemPolicy.IsObjectLike(value)) return yield * objectErrors(schema as TObject, value as Record<string, unknown>, path, context, found)
  const array = schema as TArray
  if (schema[Kind] === 'Array' && Array.isArray(value) && array.uniqueItems !== true && array.contains === undefined && array.minContains === undefined && array.maxContains === undefined) {
    if (array.minItems !== undefined && !(value.length >= array.minItems) && !found(problemOf(ValueErrorType.ArrayMinItems, schema, path, value))) return false
    if (array.maxItems !== undefined && !(value.length <= array.maxItems) && !found(problemOf(ValueErrorType.ArrayMaxItems, schema, path, value))) return false
    if (isContainer(array.items)) {
      for (const [index, item] of value.entries()) {
        if (!(yield * schemaErrors(array.items, item, `${path}/${index}`, context, found))) return false
      }
      return true
    }
    const problems = yield * context.lists.get(`schema ${JSON.stringify(array.items)}`, value, context.turns, function * () {
      const problems: SchemaProblem[] = []
      for (const [index, item] of value.entries()) {
        yield * context.turns.take()
        for (const error of Value.Errors(array.items, item)) problems.push({ path: `/${index}${error.path}`, message: error.message })
      }
      return problems
    })
    return problems.every((problem) => found({ path: `${path}${problem.path}`, message: problem.message }))
  }
  yield * context.turns.take()
  for (const error of Value.Errors(schema, value)) if (!found({ path: `${path}${error.path}`, message: error.message })) return false
  return true
}

/** TypeBox's own order: the object's size, missing required properties, unknown ones, then each known property. */
function * objectErrors (schema: TObject, value: Record<string, unknown>, path: string, context: WalkContext, found: (problem: SchemaProblem) => boolean): Generator<void, boolean, void> {
  const names = Object.getOwnPropertyNames(value)
  if (schema.minProperties !== undefined && !(names.length >= schema.minProperties) && !found(problemOf(ValueErrorType.ObjectMinProperties, schema, path, value))) return false
  if (schema.maxProperties !== undefined && !(names.length <= schema.maxProperties) && !found(problemOf(ValueErrorType.ObjectMaxProperties, schema, path, value))) return false
  const required: readonly string[] = schema.required ?? []
  const known = Object.getOwnPropertyNames(schema.properties)
  for (const name of required) {
    if (!names.includes(name) && !found(problemOf(ValueErrorType.ObjectRequiredProperty, schema.properties[name] as TSchema, `${path}/${escapeKey(name)}`, undefined))) return false
  }
  const additional = schema.additionalProperties
  for (const name of names.filter((name) => !known.includes(name))) {
    if (additional === false && !found(problemOf(ValueErrorType.ObjectAdditionalProperties, schema, `${path}/${escapeKey(name)}`, value[name]))) return false
    if (typeof additional === 'object' && !(yield * schemaErrors(additional, value[name], `${path}/${escapeKey(name)}`, context, found))) return false
  }
  for (const name of known) {
    if (!required.includes(name) && !TypeSystemPolicy.IsExactOptionalProperty(value, name)) continue
    if (!(yield * schemaErrors(schema.properties[name] as TSchema, value[name], `${path}/${escapeKey(name)}`, context, found))) return false
  }
  return true
}

/** Whether `value` passes `schema`, found in turns as schemaErrors finds problems. */
export function * passesSchema (schema: TSchema, value: unknown, context: WalkContext): Generator<void, boolean, void> {
  return yield * schemaErrors(schema, value, '', context, () => false)
}
