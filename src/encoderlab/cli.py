import typer
app = typer.Typer()
@app.command()
def demo():
    pass
