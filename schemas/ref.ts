import { Type, type SchemaOptions, type Static, type TSchema, type TUnsafe } from '@sinclair/typebox'

/**
 * A reference to a named schema (one with an `$id`), typed as the schema itself. The named
 * schemas are registered once with Fastify (schemas/components.ts lists them) and become
 * `#/components/schemas/<$id>` in the OpenAPI document, so generated clients get one type per
 * body instead of a copy per operation.
 */
export function ref<T extends TSchema> (schema: T, options: SchemaOptions = {}): TUnsafe<Static<T>> {
  if (schema.$id === undefined) throw new Error('only a schema with an $id can be referenced')
  return Type.Unsafe<Static<T>>(Type.Ref(schema.$id, options))
}
